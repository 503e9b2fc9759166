"""A real S3-compatible store on 127.0.0.1 for tests: Versity S3 Gateway (versitygw), posix backend.

`e2e/build-binaries.sh` builds it from its Go module (`VERSITYGW_VERSION` in versions.env). It
speaks the S3 protocol with SigV4 authentication, like AWS S3 or MinIO: the build's s3:// source
(`builders/s3_source.py`) is tested against it with real keys, real refusals (wrong secret key,
unknown access key) and real missing buckets and keys. It runs with an internal IAM directory, so
that an unknown access key is answered `InvalidAccessKeyId` as AWS answers it (in its single-account
mode it answers a gateway-specific code). Optional TLS: a serving certificate for 127.0.0.1 signed
by a CA made with the project's own certificate helper (`pki.py`).

    store = LocalObjectStore(binary, tmp_dir).start()   # or start(tls=True)
    store.create_bucket("models"); store.put_object("models", "m.onnx", data)
    ... store.endpoint, store.access_key, store.secret_key, store.ca_file ...
    store.stop()
"""

from __future__ import annotations

import io
import secrets
from dataclasses import dataclass, field
from pathlib import Path

import urllib3
from minio import Minio

from tailpilot.builders.triton_server import free_port
from tailpilot_e2e import pki
from tailpilot_e2e.procs import Component, pid_runs, read_pid, start, stop

#: Name of the process (its PID file and log under the state directory).
NAME = "versitygw"


@dataclass
class LocalObjectStore:
    """One versitygw process on 127.0.0.1, its data, IAM, PID file and log under `state`."""

    binary: Path
    state: Path
    #: The root user's keys; random per store unless given.
    access_key: str = field(default_factory=lambda: "AK" + secrets.token_hex(8).upper())
    secret_key: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    port: int = 0
    tls: bool = False

    @property
    def endpoint(self) -> str:
        """`http://127.0.0.1:PORT` or `https://127.0.0.1:PORT`."""
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    @property
    def ca_file(self) -> Path:
        """The CA that signed the serving certificate (with TLS)."""
        return self.state / "pki" / "ca.crt"

    def start(self, *, tls: bool = False, timeout_s: float = 30.0) -> LocalObjectStore:
        """Start the gateway on a free port and wait (bounded) until it answers a signed request."""
        if not self.binary.is_file():
            raise FileNotFoundError(
                f"{self.binary}: versitygw is missing (`make binaries` or "
                "`bash e2e/build-binaries.sh versitygw` builds it from its Go module, cached)"
            )
        self.tls = tls
        self.port = free_port()
        data, iam = self.state / "data", self.state / "iam"
        data.mkdir(parents=True, exist_ok=True)
        iam.mkdir(parents=True, exist_ok=True)
        argv = [
            str(self.binary),
            "--access",
            self.access_key,
            "--secret",
            self.secret_key,
            "--port",
            f"127.0.0.1:{self.port}",
            "--iam-dir",
            str(iam),
            "--quiet",
        ]
        if tls:
            cert, key = self._serving_certificate()
            argv += ["--cert", str(cert), "--key", str(key)]
        argv += ["posix", str(data)]
        start(
            Component(
                name=NAME, argv=argv, ports=[self.port], is_ready=self._answers, ready_timeout_s=timeout_s
            ),
            state=self.state,
        )
        return self

    def _serving_certificate(self) -> tuple[Path, Path]:
        return pki.localhost_server_certificate(self.state / "pki", "object-store")

    def client(self) -> Minio:
        """An S3 client with the root user's keys (path-style; trusts the CA with TLS)."""
        http = urllib3.PoolManager(
            timeout=urllib3.Timeout(connect=2, read=10),
            cert_reqs="CERT_REQUIRED",
            ca_certs=str(self.ca_file) if self.tls else None,
            retries=urllib3.Retry(total=0),
        )
        return Minio(
            f"127.0.0.1:{self.port}",
            access_key=self.access_key,
            secret_key=self.secret_key,
            secure=self.tls,
            region="us-east-1",
            http_client=http,
        )

    def _answers(self) -> bool:
        try:
            self.client().list_buckets()
        except urllib3.exceptions.HTTPError:
            return False  # not listening yet
        return True

    def create_bucket(self, bucket: str) -> None:
        """Create `bucket` through the S3 API."""
        self.client().make_bucket(bucket)

    def put_object(self, bucket: str, key: str, data: bytes) -> None:
        """Store `data` as `bucket/key` through the S3 API."""
        self.client().put_object(bucket, key, io.BytesIO(data), len(data))

    def running(self) -> bool:
        """Whether the gateway's process (by its PID file) still runs."""
        pid = read_pid(self.state / f"{NAME}.pid")
        return pid is not None and pid_runs(pid, str(self.binary))

    def stop(self) -> None:
        """Stop the gateway by its PID (SIGTERM, then SIGKILL after a grace period)."""
        stop(NAME, state=self.state, binary=str(self.binary))
