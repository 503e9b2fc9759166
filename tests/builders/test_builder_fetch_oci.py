"""oci:// model pulls (`builders/oci_source.py`) against a real OCI registry, and its pure parts.

The registry is CNCF Distribution's (`e2e/oci_registry.py`) on 127.0.0.1: TLS with a certificate
from the project's CA, htpasswd auth, filesystem storage. Artifacts are pushed through its HTTP API
in the shapes `oras push` and a KServe modelcar image have. The Bearer-token dance, which this
registry does not speak without a token server, is checked against an in-process transport.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tailpilot.builders.errors import (
    MODEL_ACCESS_DENIED,
    MODEL_CA_BUNDLE_MISSING,
    MODEL_CHECKSUM_MISMATCH,
    MODEL_CREDENTIALS_MISSING,
    MODEL_NOT_FOUND,
    MODEL_TOO_LARGE,
    MODEL_UNREACHABLE,
    UNSUPPORTED_URI,
    BuildError,
)
from tailpilot.builders.fetch import FetchOptions, fetch
from tailpilot.builders.oci_source import (
    DOCKER_CONFIG_KEY,
    OCI_INDEX,
    OCI_MANIFEST,
    Descriptor,
    Manifest,
    StackedFiles,
    _Registry,
    choose_layers,
    choose_platform,
    fetch_oci,
    manifest_digest_refusal,
    model_member,
    parse_manifest,
    parse_oci_uri,
    parse_www_authenticate,
    read_registry_credentials,
    registry_credentials,
)
from tailpilot.builders.redirects import redirect_refusal
from tailpilot_e2e.config import Binaries
from tailpilot_e2e.oci_registry import LocalRegistry

SECRET = "registry-pull"


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRegistry]:
    """A real OCI registry on https://127.0.0.1:PORT (htpasswd auth), stopped by PID at the end."""
    # `make test` builds the binary first (`make binaries`); a missing one fails here, naming the fix.
    running = LocalRegistry(Binaries.from_cache().registry, tmp_path_factory.mktemp("oci-registry")).start()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def model_bytes(example_model: Path) -> bytes:
    return example_model.read_bytes()


def credentials(tmp_path: Path, registry: LocalRegistry, *, password: str | None = None) -> Path:
    """A mounted kubernetes.io/dockerconfigjson Secret for the registry."""
    directory = tmp_path / "credentials"
    directory.mkdir(exist_ok=True)
    (directory / DOCKER_CONFIG_KEY).write_text(json.dumps(registry.docker_config(password=password)))
    return directory


def pull(
    registry: LocalRegistry,
    uri: str,
    dest: Path,
    *,
    credentials_dir: Path | None,
    secret: str | None = SECRET,
    trust: bool = True,
    max_bytes: int = 1 << 30,
) -> tuple[str, int]:
    return fetch_oci(
        uri,
        dest,
        credentials_dir=credentials_dir,
        credentials_secret=secret,
        ca_bundle=str(registry.ca_file) if trust else None,
        timeout_s=10,
        max_bytes=max_bytes,
    )


def failure(call: object) -> BuildError:
    assert callable(call)
    with pytest.raises(BuildError) as caught:
        call()
    return caught.value


# --- against the real registry ---------------------------------------------------------------


def test_oras_artifact_yields_its_onnx_layer(
    registry: LocalRegistry, model_bytes: bytes, tmp_path: Path
) -> None:
    digest = registry.push_oras_artifact(
        "models/oras", "v1", {"README.md": b"# a model\n", "model.onnx": model_bytes}
    )
    dest = tmp_path / "work" / "model.onnx"
    sha, size = pull(
        registry,
        registry.uri("models/oras", digest, tag="v1"),
        dest,
        credentials_dir=credentials(tmp_path, registry),
    )
    assert dest.read_bytes() == model_bytes
    assert (sha, size) == (hashlib.sha256(model_bytes).hexdigest(), len(model_bytes))


def test_modelcar_gzip_image_yields_the_file_under_models(
    registry: LocalRegistry, model_bytes: bytes, tmp_path: Path
) -> None:
    digest = registry.push_modelcar(
        "models/car", "v1", {"models/README": b"docs", "models/resnet.onnx": model_bytes, "etc/x.onnx": b"no"}
    )
    dest = tmp_path / "model.onnx"
    sha, _ = pull(
        registry, registry.uri("models/car", digest), dest, credentials_dir=credentials(tmp_path, registry)
    )
    assert dest.read_bytes() == model_bytes
    assert sha == hashlib.sha256(model_bytes).hexdigest()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["credentials", "model.onnx"]  # no part files left


def test_image_layers_stack_later_files_win_and_whiteouts_delete(
    registry: LocalRegistry, model_bytes: bytes, tmp_path: Path
) -> None:
    digest = registry.push_image(
        "models/stacked",
        "v1",
        [
            ({"./models/old.onnx": b"old model", "./models/model.onnx": b"first version"}, False),
            ({"./models/.wh.old.onnx": b"", "./models/model.onnx": model_bytes}, True),
        ],
    )
    dest = tmp_path / "model.onnx"
    pull(
        registry,
        registry.uri("models/stacked", digest),
        dest,
        credentials_dir=credentials(tmp_path, registry),
    )
    assert dest.read_bytes() == model_bytes


def test_index_resolves_to_its_linux_amd64_manifest(
    registry: LocalRegistry, model_bytes: bytes, tmp_path: Path
) -> None:
    arm = registry.push_modelcar("models/multi", "arm", {"models/m.onnx": b"the arm64 build"})
    amd = registry.push_modelcar("models/multi", "amd", {"models/m.onnx": model_bytes})
    index = registry.push_index("models/multi", "v1", [(arm, "linux/arm64"), (amd, "linux/amd64")])
    dest = tmp_path / "model.onnx"
    pull(
        registry,
        registry.uri("models/multi", index, tag="v1"),
        dest,
        credentials_dir=credentials(tmp_path, registry),
    )
    assert dest.read_bytes() == model_bytes


def test_wrong_password_is_access_denied_and_never_printed(
    registry: LocalRegistry, model_bytes: bytes, tmp_path: Path
) -> None:
    digest = registry.push_oras_artifact("models/denied", "v1", {"model.onnx": model_bytes})
    uri = registry.uri("models/denied", digest)
    wrong = "not-the-password-" + "x" * 8
    error = failure(
        lambda: pull(
            registry,
            uri,
            tmp_path / "m.onnx",
            credentials_dir=credentials(tmp_path, registry, password=wrong),
        )
    )
    assert error.reason == MODEL_ACCESS_DENIED
    assert uri in error.message and "refused the credentials" in error.message
    assert wrong not in error.message and registry.password not in error.message
    assert not (tmp_path / "m.onnx").exists()


def test_anonymous_pull_of_a_private_registry_is_access_denied(
    registry: LocalRegistry, model_bytes: bytes, tmp_path: Path
) -> None:
    digest = registry.push_oras_artifact("models/private", "v1", {"model.onnx": model_bytes})
    error = failure(
        lambda: pull(
            registry,
            registry.uri("models/private", digest),
            tmp_path / "m.onnx",
            credentials_dir=None,
            secret=None,
        )
    )
    assert error.reason == MODEL_ACCESS_DENIED
    assert "names no credentials Secret" in error.message


@pytest.mark.parametrize("repository", ["models/oras-known", "models/never-pushed"])
def test_unknown_digest_or_repository_is_not_found(
    registry: LocalRegistry, model_bytes: bytes, tmp_path: Path, repository: str
) -> None:
    registry.push_oras_artifact("models/oras-known", "v1", {"model.onnx": model_bytes})
    uri = registry.uri(repository, "sha256:" + "ab" * 32)
    error = failure(
        lambda: pull(registry, uri, tmp_path / "m.onnx", credentials_dir=credentials(tmp_path, registry))
    )
    assert error.reason == MODEL_NOT_FOUND
    assert uri in error.message and "HTTP 404" in error.message
    assert "MANIFEST_UNKNOWN" in error.message or "NAME_UNKNOWN" in error.message


def test_two_onnx_files_are_not_found_naming_both(registry: LocalRegistry, tmp_path: Path) -> None:
    digest = registry.push_oras_artifact("models/two", "v1", {"a.onnx": b"model a", "b.onnx": b"model b"})
    error = failure(
        lambda: pull(
            registry,
            registry.uri("models/two", digest),
            tmp_path / "m.onnx",
            credentials_dir=credentials(tmp_path, registry),
        )
    )
    assert error.reason == MODEL_NOT_FOUND
    assert "a.onnx" in error.message and "b.onnx" in error.message


def test_modelcar_without_a_model_lists_what_it_holds(registry: LocalRegistry, tmp_path: Path) -> None:
    digest = registry.push_modelcar("models/empty", "v1", {"models/config.json": b"{}", "bin/sh": b"#!"})
    error = failure(
        lambda: pull(
            registry,
            registry.uri("models/empty", digest),
            tmp_path / "m.onnx",
            credentials_dir=credentials(tmp_path, registry),
        )
    )
    assert error.reason == MODEL_NOT_FOUND
    assert "models/config.json" in error.message and "under /models/" in error.message


def test_secret_without_dockerconfigjson_is_credentials_missing(
    registry: LocalRegistry, tmp_path: Path
) -> None:
    mounted = tmp_path / "credentials"
    mounted.mkdir()
    (mounted / "AWS_ACCESS_KEY_ID").write_text("not a registry key")
    uri = registry.uri("models/oras", "sha256:" + "0" * 64)
    error = failure(lambda: pull(registry, uri, tmp_path / "m.onnx", credentials_dir=mounted))
    assert error.reason == MODEL_CREDENTIALS_MISSING
    assert (
        repr(SECRET) in error.message
        and registry.host in error.message
        and DOCKER_CONFIG_KEY in error.message
    )


def test_without_the_ca_bundle_the_registry_is_unreachable(
    registry: LocalRegistry, model_bytes: bytes, tmp_path: Path
) -> None:
    digest = registry.push_oras_artifact("models/tls", "v1", {"model.onnx": model_bytes})
    error = failure(
        lambda: pull(
            registry,
            registry.uri("models/tls", digest),
            tmp_path / "m.onnx",
            credentials_dir=credentials(tmp_path, registry),
            trust=False,
        )
    )
    assert error.reason == MODEL_UNREACHABLE
    assert "CERTIFICATE_VERIFY_FAILED" in error.message


@pytest.mark.parametrize("shape", ["oras", "modelcar"])
def test_model_larger_than_the_bound_is_refused(
    registry: LocalRegistry, model_bytes: bytes, tmp_path: Path, shape: str
) -> None:
    if shape == "oras":
        digest = registry.push_oras_artifact("models/big", "v1", {"model.onnx": model_bytes})
    else:
        digest = registry.push_modelcar("models/big", "car", {"models/model.onnx": model_bytes})
    dest = tmp_path / "m.onnx"
    with pytest.raises(BuildError) as caught:
        pull(
            registry,
            registry.uri("models/big", digest),
            dest,
            credentials_dir=credentials(tmp_path, registry),
            max_bytes=len(model_bytes) - 1,
        )
    assert caught.value.reason == MODEL_TOO_LARGE, caught.value.message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["credentials"]


def _flip_last_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))


def test_a_tampered_blob_is_a_checksum_mismatch(
    registry: LocalRegistry, model_bytes: bytes, tmp_path: Path
) -> None:
    """The registry serves what its storage holds; the build checks the bytes against the descriptor."""
    # Bytes of its own: the storage is content-addressed, shared by every test of the module.
    model = model_bytes + b"\0tampered-blob"
    digest = registry.push_oras_artifact("models/tampered", "v1", {"model.onnx": model})
    blob = "sha256:" + hashlib.sha256(model).hexdigest()
    _flip_last_byte(registry.blob_file(blob))
    dest = tmp_path / "m.onnx"
    error = failure(
        lambda: pull(
            registry,
            registry.uri("models/tampered", digest),
            dest,
            credentials_dir=credentials(tmp_path, registry),
        )
    )
    assert error.reason == MODEL_CHECKSUM_MISMATCH
    assert blob in error.message
    assert not dest.exists()


def test_a_tampered_modelcar_layer_is_a_checksum_mismatch(
    registry: LocalRegistry, model_bytes: bytes, tmp_path: Path
) -> None:
    model = model_bytes + b"\0tampered-layer"  # its own layer: the storage is shared (above)
    digest = registry.push_image("models/tampered-car", "v1", [({"models/m.onnx": model}, False)])
    with registry.client() as client:
        manifest = client.get(
            f"/v2/models/tampered-car/manifests/{digest}", headers={"Accept": OCI_MANIFEST}
        ).json()
    layer = manifest["layers"][0]["digest"]
    # Inside the model's bytes (not the tar's padding): the file written would differ too.
    path = registry.blob_file(layer)
    data = bytearray(path.read_bytes())
    data[600] ^= 0x01
    path.write_bytes(bytes(data))
    dest = tmp_path / "m.onnx"
    error = failure(
        lambda: pull(
            registry,
            registry.uri("models/tampered-car", digest),
            dest,
            credentials_dir=credentials(tmp_path, registry),
        )
    )
    assert error.reason == MODEL_CHECKSUM_MISMATCH
    assert layer in error.message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["credentials"]


def test_a_tampered_manifest_is_a_checksum_mismatch(
    registry: LocalRegistry, model_bytes: bytes, tmp_path: Path
) -> None:
    model = model_bytes + b"\0tampered-manifest"  # its own manifest and blob: the storage is shared
    digest = registry.push_oras_artifact("models/tampered-manifest", "v1", {"model.onnx": model})
    path = registry.blob_file(digest)
    path.write_bytes(path.read_bytes().replace(b'"schemaVersion":2', b'"schemaVersion":2 '))
    error = failure(
        lambda: pull(
            registry,
            registry.uri("models/tampered-manifest", digest),
            tmp_path / "m.onnx",
            credentials_dir=credentials(tmp_path, registry),
        )
    )
    assert error.reason == MODEL_CHECKSUM_MISMATCH
    assert f"manifest {digest}" in error.message


# --- Bearer tokens and redirects, against an in-process transport ----------------------------


def test_bearer_challenge_gets_a_token_with_the_credentials_and_redirects_drop_it() -> None:
    ref = parse_oci_uri("oci://registry.example:5000/team/model:v1@sha256:" + "1" * 64)
    seen: list[tuple[str, str | None]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((str(request.url), request.headers.get("authorization")))
        if request.url.host == "auth.example":
            assert request.url.params["service"] == "registry.example"
            assert request.url.params["scope"] == "repository:team/model:pull"
            basic = "Basic " + base64.b64encode(b"robot:s3cret").decode()
            if request.headers.get("authorization") != basic:
                return httpx.Response(401)
            return httpx.Response(200, json={"access_token": "tok-123"})
        if request.url.host == "storage.example":
            return httpx.Response(200, content=b"blob bytes")
        if request.headers.get("authorization") != "Bearer tok-123":
            return httpx.Response(
                401,
                headers={
                    "WWW-Authenticate": 'Bearer realm="https://auth.example/token",service="registry.example",'
                    'scope="repository:team/model:pull"'
                },
            )
        return httpx.Response(307, headers={"Location": "https://storage.example/blob?sig=abc"})

    with httpx.Client(transport=httpx.MockTransport(handler)) as client:
        conversation = _Registry(
            client,
            ref,
            credentials=("robot", "s3cret"),
            label="model test",
            refusal=lambda a, b: redirect_refusal(a, b, resolve=lambda _host: ["203.0.113.7"]),
        )
        with conversation.get(ref.url("blobs", "sha256:" + "2" * 64)) as response:
            assert response.read() == b"blob bytes"
    assert [(url.split("?")[0], auth) for url, auth in seen] == [
        (f"https://registry.example:5000/v2/team/model/blobs/sha256:{'2' * 64}", None),
        ("https://auth.example/token", "Basic " + base64.b64encode(b"robot:s3cret").decode()),
        (f"https://registry.example:5000/v2/team/model/blobs/sha256:{'2' * 64}", "Bearer tok-123"),
        ("https://storage.example/blob", None),  # the storage host never sees the registry's token
    ]


@pytest.mark.parametrize(
    ("status", "reason"), [(401, MODEL_ACCESS_DENIED), (403, MODEL_ACCESS_DENIED), (500, MODEL_UNREACHABLE)]
)
def test_token_service_refusals(status: int, reason: str) -> None:
    ref = parse_oci_uri("oci://registry.example/team/model@sha256:" + "1" * 64)

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "auth.example":
            return httpx.Response(status)
        return httpx.Response(401, headers={"WWW-Authenticate": 'Bearer realm="https://auth.example/token"'})

    with httpx.Client(transport=httpx.MockTransport(handler)) as client:
        conversation = _Registry(client, ref, credentials=None, label="model x", refusal=lambda a, b: None)
        error = failure(lambda: conversation.get(ref.url("manifests", ref.digest)).__enter__())
    assert error.reason == reason


def test_a_redirect_to_plain_http_is_refused() -> None:
    ref = parse_oci_uri("oci://registry.example/team/model@sha256:" + "1" * 64)

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(302, headers={"Location": "http://storage.example/blob"})

    with httpx.Client(transport=httpx.MockTransport(handler)) as client:
        conversation = _Registry(client, ref, credentials=None, label="model x", refusal=redirect_refusal)
        error = failure(lambda: conversation.get(ref.url("blobs", ref.digest)).__enter__())
    assert error.reason == MODEL_UNREACHABLE
    assert "from https to http" in error.message


# --- pure parts ------------------------------------------------------------------------------

DIGEST = "sha256:" + "a" * 64


@pytest.mark.parametrize(
    ("uri", "parts"),
    [
        (f"oci://ghcr.io/acme/models/resnet@{DIGEST}", ("ghcr.io", "acme/models/resnet", None, DIGEST)),
        (f"oci://127.0.0.1:5000/m:v1.2-rc_1@{DIGEST}", ("127.0.0.1:5000", "m", "v1.2-rc_1", DIGEST)),
    ],
)
def test_parse_oci_uri(uri: str, parts: tuple[str, str, str | None, str]) -> None:
    ref = parse_oci_uri(uri)
    assert (ref.registry, ref.repository, ref.tag, ref.digest) == parts


@pytest.mark.parametrize(
    "uri",
    [
        "oci://ghcr.io/acme/resnet:v1",  # no digest: a tag alone can move
        f"oci://ghcr.io/Acme/resnet@{DIGEST}",  # repositories are lower case
        f"oci://ghcr.io/acme/resnet@sha512:{'a' * 128}",
        f"oci://ghcr.io@{DIGEST}",
    ],
)
def test_parse_oci_uri_refuses_other_shapes(uri: str) -> None:
    assert failure(lambda: parse_oci_uri(uri)).reason == UNSUPPORTED_URI


def test_docker_hub_names_map_to_its_api() -> None:
    ref = parse_oci_uri(f"oci://docker.io/busybox@{DIGEST}")
    assert (
        ref.url("manifests", DIGEST) == f"https://registry-1.docker.io/v2/library/busybox/manifests/{DIGEST}"
    )
    assert parse_oci_uri(f"oci://docker.io/acme/m@{DIGEST}").api_repository == "acme/m"


def test_parse_www_authenticate() -> None:
    bearer = parse_www_authenticate(
        'Bearer realm="https://auth.example/token",service="registry.example",'
        'scope="repository:a/b:pull,push repository:c:pull"'
    )
    assert bearer is not None and bearer.scheme == "bearer"
    assert bearer.params == {
        "realm": "https://auth.example/token",
        "service": "registry.example",
        "scope": "repository:a/b:pull,push repository:c:pull",
    }
    basic = parse_www_authenticate('Basic realm="Registry Realm"')
    assert basic is not None and (basic.scheme, basic.params) == ("basic", {"realm": "Registry Realm"})
    assert parse_www_authenticate("") is None


def _auth(user: str, password: str) -> str:
    return base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.mark.parametrize(
    ("auths", "registry", "expected"),
    [
        (
            {"reg.example:5000": {"auth": _auth("u", "p:with:colons")}},
            "reg.example:5000",
            ("u", "p:with:colons"),
        ),
        ({"https://reg.example/v2/": {"username": "u", "password": "p"}}, "reg.example", ("u", "p")),
        ({"https://index.docker.io/v1/": {"auth": _auth("hub", "p")}}, "docker.io", ("hub", "p")),
        (
            {"reg.example": {"auth": _auth("u", "p")}},
            "reg.example:5000",
            None,
        ),  # the port is part of the name
        ({"other.example": {"auth": _auth("u", "p")}}, "reg.example", None),
        ({"reg.example": {"auth": "not base64!"}}, "reg.example", None),
    ],
)
def test_registry_credentials(
    auths: dict[str, object], registry: str, expected: tuple[str, str] | None
) -> None:
    assert registry_credentials({"auths": auths}, registry) == expected


def test_read_registry_credentials_names_the_secret_and_registry_not_values(tmp_path: Path) -> None:
    assert (
        failure(lambda: read_registry_credentials(None, "pull", "reg.example")).reason
        == MODEL_CREDENTIALS_MISSING
    )
    (tmp_path / DOCKER_CONFIG_KEY).write_text(
        json.dumps({"auths": {"other.example": {"auth": _auth("u", "hunter2")}}})
    )
    error = failure(lambda: read_registry_credentials(tmp_path, "pull", "reg.example"))
    assert error.reason == MODEL_CREDENTIALS_MISSING
    assert "'pull'" in error.message and "reg.example" in error.message and "hunter2" not in error.message
    (tmp_path / DOCKER_CONFIG_KEY).write_text("{not json")
    assert "not JSON" in failure(lambda: read_registry_credentials(tmp_path, "pull", "reg.example")).message
    (tmp_path / DOCKER_CONFIG_KEY).write_text(
        json.dumps({"auths": {"reg.example": {"auth": _auth("u", "p")}}})
    )
    assert read_registry_credentials(tmp_path, "pull", "reg.example") == ("u", "p")


def test_manifest_digest_refusal() -> None:
    body = b'{"schemaVersion":2}'
    right = "sha256:" + hashlib.sha256(body).hexdigest()
    assert manifest_digest_refusal(body, right) is None
    assert manifest_digest_refusal(body + b" ", right) == (
        f"its bytes hash to sha256:{hashlib.sha256(body + b' ').hexdigest()}, not {right}"
    )


def _descriptor(digest_char: str, **extra: object) -> dict[str, object]:
    return {"mediaType": OCI_MANIFEST, "digest": "sha256:" + digest_char * 64, "size": 10, **extra}


def test_parse_manifest_and_choose_platform() -> None:
    index = parse_manifest(
        json.dumps(
            {
                "mediaType": OCI_INDEX,
                "manifests": [
                    _descriptor("1", platform={"os": "linux", "architecture": "arm64"}),
                    _descriptor("2", platform={"os": "linux", "architecture": "amd64"}),
                    _descriptor("3", platform={"os": "unknown", "architecture": "unknown"}),
                ],
            }
        ).encode()
    )
    assert index.is_index
    chosen = choose_platform(index)
    assert chosen is not None and chosen.digest == "sha256:" + "2" * 64
    only = Manifest(is_index=True, entries=(Descriptor(OCI_MANIFEST, DIGEST, 1, platform="linux/arm64"),))
    assert choose_platform(only) == only.entries[0]
    two = Manifest(
        is_index=True, entries=only.entries + (Descriptor(OCI_MANIFEST, DIGEST, 1, platform="linux/s390x"),)
    )
    assert choose_platform(two) is None
    with pytest.raises(ValueError, match="not an OCI or Docker v2 manifest"):
        parse_manifest(
            b'{"schemaVersion":1,"mediaType":"application/vnd.docker.distribution.manifest.v1+json"}'
        )
    with pytest.raises(ValueError, match="sha256"):
        parse_manifest(
            json.dumps({"mediaType": OCI_MANIFEST, "layers": [{"digest": "md5:x", "size": 1}]}).encode()
        )


TAR = "application/vnd.oci.image.layer.v1.tar"
TGZ = "application/vnd.oci.image.layer.v1.tar+gzip"


def test_choose_layers() -> None:
    model = Descriptor(TAR, DIGEST, 1, title="model.onnx")
    readme = Descriptor(TAR, DIGEST, 1, title="README.md")
    assert choose_layers((readme, model), suffixes=(".onnx",), uri="u", what="model").titled == model
    two = failure(
        lambda: choose_layers(
            (model, Descriptor(TAR, DIGEST, 1, title="b.ONNX")), suffixes=(".onnx",), uri="u", what="model"
        )
    )
    assert two.reason == MODEL_NOT_FOUND and "model.onnx" in two.message and "b.ONNX" in two.message
    none = failure(lambda: choose_layers((readme,), suffixes=(".onnx",), uri="u", what="model"))
    assert none.reason == MODEL_NOT_FOUND and "README.md" in none.message
    base, top = Descriptor(TGZ, DIGEST, 1), Descriptor(TAR, DIGEST, 1)
    directory = Descriptor(TGZ, DIGEST, 1, title="models", unpack=True)
    config = Descriptor("application/vnd.oci.image.config.v1+json", DIGEST, 1)
    assert choose_layers((base, readme, config, top), suffixes=(".onnx",), uri="u", what="m").archives == (
        base,
        top,
    )
    assert choose_layers((directory,), suffixes=(".onnx",), uri="u", what="m").archives == (directory,)
    calibration = Descriptor(TAR, DIGEST, 1, title="calibration.npz")
    assert choose_layers((calibration,), suffixes=None, uri="u", what="calibration").titled == calibration


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("models/m.onnx", "models/m.onnx"),
        ("./models/m.onnx", "models/m.onnx"),
        ("/models/resnet/1/model.onnx", "models/resnet/1/model.onnx"),
        ("models/m.onnx.sig", None),
        ("data/models/m.onnx", None),
        ("models.onnx", None),
    ],
)
def test_model_member(name: str, expected: str | None) -> None:
    assert model_member(name, (".onnx",)) == expected


def test_stacked_files_later_layers_win_and_whiteouts_delete_lower_layers_only() -> None:
    stack = StackedFiles()
    a0, b0, a1, c1 = Path("a0"), Path("b0"), Path("a1"), Path("c1")
    assert stack.add("models/a.onnx", 0, a0) is None
    stack.add("models/sub/b.onnx", 0, b0)
    assert stack.add("models/a.onnx", 1, a1) == a0
    stack.add("models/c.onnx", 1, c1)
    assert stack.whiteout("./models/.wh.sub", 1) == [b0]
    assert stack.whiteout("models/.wh..wh..opq", 1) == []  # same layer: only lower layers are hidden
    assert stack.whiteout("models/.wh..wh..opq", 2) == [a1, c1]
    assert stack.files == {}


# --- through the build's fetch (the scheme's dispatch, calibration's file, the CA's mount) ---------


def test_the_builds_fetch_takes_the_model_and_calibration_data_from_one_artifact(
    registry: LocalRegistry, model_bytes: bytes, tmp_path: Path
) -> None:
    calibration = b"PK\x03\x04 calibration arrays"
    digest = registry.push_oras_artifact(
        "models/with-calibration", "v1", {"model.onnx": model_bytes, "calibration.npz": calibration}
    )
    uri = registry.uri("models/with-calibration", digest)
    options = FetchOptions(
        ca_bundle=str(registry.ca_file),
        credentials_dir=credentials(tmp_path, registry),
        credentials_secret=SECRET,
        timeout_s=10,
    )
    model = fetch(uri, tmp_path / "source.onnx", expected_sha256=None, options=options)
    assert model.path.read_bytes() == model_bytes
    assert model.revision == digest  # the pin, recorded with the engine (status.engine.modelRevision)
    data = fetch(uri, tmp_path / "calibration.bin", expected_sha256=None, options=options, suffixes=(".npz",))
    assert data.path.read_bytes() == calibration
    # A sha256 in the spec is checked on top of the digest pin.
    error = failure(lambda: fetch(uri, tmp_path / "again.onnx", expected_sha256="0" * 64, options=options))
    assert error.reason == MODEL_CHECKSUM_MISMATCH


def test_a_ca_bundle_named_but_not_mounted_is_its_own_failure(
    registry: LocalRegistry, tmp_path: Path
) -> None:
    options = FetchOptions(ca_bundle=str(tmp_path / "model-ca" / "ca.crt"), timeout_s=10)
    uri = registry.uri("models/any", "sha256:" + "a" * 64)
    error = failure(lambda: fetch(uri, tmp_path / "m.onnx", expected_sha256=None, options=options))
    assert error.reason == MODEL_CA_BUNDLE_MISSING
    assert "spec.model.caBundleConfigMapRef" in error.message
