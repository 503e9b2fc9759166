"""Real replicas for the activator's tests, on 127.0.0.1: KServe v2 over HTTP and gRPC, echoing.

- `EchoHttpReplica`: an aiohttp server answering `/v2/health/ready`, `/v2/models/{m}/ready` and
  `/v2/models/{m}/infer` (the input tensors echoed as `OUTPUT0...`, JSON or Triton's binary
  extension), and any other path with a JSON description of the request it got; an optional
  delay before each answer.
- `EchoGrpcReplica`: a `grpc.aio` server implementing `inference.GRPCInferenceService` from
  tritonclient's generated code: health, metadata, and ModelInfer echoing its raw input tensors.
- `DyingReplica`: accepts a connection, reads the request, closes without answering (a replica
  that died mid-forward), on one port used for both protocols.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

import grpc
import grpc.aio
from aiohttp import web
from tritonclient.grpc import service_pb2, service_pb2_grpc

from tailpilot.activator.backends import Endpoint

LOCALHOST = "127.0.0.1"
BINARY_HEADER = "Inference-Header-Content-Length"


@dataclass
class SeenRequest:
    """One request a replica got."""

    method: str
    path_qs: str
    headers: dict[str, str]
    body: bytes


def _echo_infer(model: str, body: bytes, header_length: int | None) -> tuple[bytes, dict[str, str]]:
    """A KServe v2 infer answer echoing the inputs of `body` (JSON, or JSON + binary tensors)."""
    header = json.loads(body[:header_length] if header_length is not None else body)
    binary = body[header_length:] if header_length is not None else b""
    outputs, blobs = [], []
    for index, tensor in enumerate(header["inputs"]):
        output = {"name": f"OUTPUT{index}", "datatype": tensor["datatype"], "shape": tensor["shape"]}
        size = (tensor.get("parameters") or {}).get("binary_data_size")
        if size is not None:
            blobs.append(binary[:size])
            binary = binary[size:]
            output["parameters"] = {"binary_data_size": size}
        else:
            output["data"] = tensor["data"]
        outputs.append(output)
    answer = json.dumps({"model_name": model, "id": header.get("id", ""), "outputs": outputs}).encode()
    if not blobs:
        return answer, {"Content-Type": "application/json"}
    return answer + b"".join(blobs), {
        "Content-Type": "application/octet-stream",
        BINARY_HEADER: str(len(answer)),
    }


class EchoHttpReplica:
    """A KServe v2 HTTP replica that echoes (see the module's docstring)."""

    def __init__(self, *, name: str = "replica", delay_s: float = 0.0) -> None:
        self.name = name
        self.delay_s = delay_s
        self.seen: list[SeenRequest] = []
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def endpoint(self) -> Endpoint:
        return Endpoint(address=LOCALHOST, http_port=self.port, grpc_port=None)

    async def __aenter__(self) -> EchoHttpReplica:
        app = web.Application(client_max_size=1024**3)
        app.router.add_route("*", "/{path:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, LOCALHOST, 0)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.seen.append(SeenRequest(request.method, request.path_qs, dict(request.headers), body))
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        parts = request.path.strip("/").split("/")
        headers = {"X-Replica": self.name}
        if parts[:2] == ["v2", "health"] or (parts[:2] == ["v2", "models"] and parts[-1] == "ready"):
            return web.Response(status=200, headers=headers)
        if parts[:2] == ["v2", "models"] and parts[-1] == "infer" and request.method == "POST":
            length = request.headers.get(BINARY_HEADER)
            answer, answer_headers = _echo_infer(parts[2], body, int(length) if length else None)
            return web.Response(body=answer, headers={**headers, **answer_headers})
        if request.path == "/status/418":
            return web.json_response({"error": "I'm a teapot"}, status=418, headers=headers)
        description = {
            "method": request.method,
            "raw_path": request.raw_path,
            "headers": dict(request.headers),
            "body": body.decode("latin-1"),
        }
        return web.json_response(description, headers={**headers, "Set-Cookie": "a=1", "X-Custom": "kept"})


class _EchoServicer(service_pb2_grpc.GRPCInferenceServiceServicer):  # type: ignore[misc]
    def __init__(self, replica: EchoGrpcReplica) -> None:
        self._replica = replica

    async def ServerLive(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return service_pb2.ServerLiveResponse(live=True)

    async def ServerReady(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return service_pb2.ServerReadyResponse(ready=True)

    async def ModelReady(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return service_pb2.ModelReadyResponse(ready=True)

    async def ModelMetadata(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return service_pb2.ModelMetadataResponse(name=request.name, versions=["1"], platform="echo")

    async def ModelInfer(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        self._replica.seen.append(tuple((m.key, m.value) for m in context.invocation_metadata() or ()))
        if self._replica.delay_s:
            await asyncio.sleep(self._replica.delay_s)
        if request.model_name == "missing":
            await context.abort(grpc.StatusCode.NOT_FOUND, "Request for unknown model: 'missing'")
        context.set_trailing_metadata((("x-replica", self._replica.name),))
        response = service_pb2.ModelInferResponse(model_name=request.model_name, id=request.id)
        for index, tensor in enumerate(request.inputs):
            output = response.outputs.add()
            output.name = f"OUTPUT{index}"
            output.datatype = tensor.datatype
            output.shape.extend(tensor.shape)
        response.raw_output_contents.extend(request.raw_input_contents)
        return response


class EchoGrpcReplica:
    """A KServe v2 gRPC replica that echoes (see the module's docstring)."""

    def __init__(self, *, name: str = "replica", delay_s: float = 0.0) -> None:
        self.name = name
        self.delay_s = delay_s
        self.seen: list[tuple[tuple[str, Any], ...]] = []
        self._server: grpc.aio.Server | None = None
        self.port = 0

    @property
    def endpoint(self) -> Endpoint:
        return Endpoint(address=LOCALHOST, http_port=None, grpc_port=self.port)

    async def __aenter__(self) -> EchoGrpcReplica:
        self._server = grpc.aio.server(options=(("grpc.so_reuseport", 0),))
        service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(_EchoServicer(self), self._server)
        self.port = self._server.add_insecure_port(f"{LOCALHOST}:0")
        await self._server.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._server is not None
        await self._server.stop(None)


@dataclass
class DyingReplica:
    """Reads each request and closes the connection without answering (see the module's docstring)."""

    connections: int = 0
    port: int = 0
    _server: asyncio.Server | None = field(default=None, repr=False)

    @property
    def endpoint(self) -> Endpoint:
        return Endpoint(address=LOCALHOST, http_port=self.port, grpc_port=self.port)

    async def __aenter__(self) -> DyingReplica:
        self._server = await asyncio.start_server(self._handle, LOCALHOST, 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await asyncio.wait_for(reader.read(65536), timeout=5.0)
        except TimeoutError:
            pass
        writer.close()
        try:
            await writer.wait_closed()
        except ConnectionError:
            pass
