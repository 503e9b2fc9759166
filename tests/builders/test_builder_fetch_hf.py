"""hf:// models fetched from a Hugging Face Hub API: olah on 127.0.0.1 serving a local git repository.

olah (a self-hosted Hub mirror, `bash e2e/install-olah.sh`) serves `acme/mlp`, a git repository made
here with two commits: the older holds the model as a plain git file, `main` as an LFS file (pointer
committed, bytes under .git/lfs/objects). The revision is resolved by olah's revision API, the file's
ETag (git blob id, or LFS sha256) and `X-Repo-Commit` are olah's own answers, and so are the
refusals (401 RepoNotFound, 404 EntryNotFound). olah checks no token: a token is only shown to be
read, sent without harm, and kept out of messages; whether it reaches the Hub, and is dropped on
the way to a CDN on another host, is checked against recorded requests (`httpx.MockTransport`,
answers shaped as huggingface.co gives them), as are the answers olah cannot give (a CDN redirect,
a gated repository, a wrong sha256).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tailpilot.api.engine import BuildOutcome, BuildRequest
from tailpilot.builders.build import BuildSettings, run_build
from tailpilot.builders.errors import (
    MODEL_ACCESS_DENIED,
    MODEL_CHECKSUM_MISMATCH,
    MODEL_CREDENTIALS_MISSING,
    MODEL_NOT_FOUND,
    MODEL_TOO_LARGE,
    MODEL_UNREACHABLE,
    UNSUPPORTED_URI,
    BuildError,
)
from tailpilot.builders.hf_source import (
    HfFetched,
    HfLocation,
    fetch_hf,
    fetch_hf_with,
    parse_endpoint,
    parse_hf_uri,
    read_file_headers,
    refusal_reason,
)
from tailpilot.builders.triton_server import free_port
from tailpilot_e2e.hf_hub import LocalHub, olah_cli

REPO = "acme/mlp"
PATH = "onnx/model.onnx"
SECRET = "hf-credentials"
TOKEN = "hf_TESTtokenNOTreal0123456789"


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalHub]:
    """olah on 127.0.0.1, offline, serving the local repositories; stopped by PID at the end."""
    if not olah_cli().is_file():
        pytest.fail(f"{olah_cli()} is missing: run `bash e2e/install-olah.sh` (olah in its own venv, cached)")
    hub = LocalHub(tmp_path_factory.mktemp("hf-hub")).start()
    try:
        yield hub
    finally:
        hub.stop()
    assert not hub.running()


@pytest.fixture(scope="module")
def versions(hub: LocalHub, example_model: Path) -> dict[str, tuple[str, bytes]]:
    """`acme/mlp`'s commits and the model's bytes at each.

    "old": the model as a plain git file; "new": other bytes, as an LFS file; "head" (main): the
    model unchanged since "new", `onnx/extra.onnx` added.
    """
    old_bytes = example_model.read_bytes()[:-1] + b"\x01"  # other bytes, another sha256
    new_bytes = example_model.read_bytes()
    old = hub.commit(REPO, {PATH: old_bytes, "README.md": b"acme mlp\n"}, lfs=False, message="first")
    new = hub.commit(REPO, {PATH: new_bytes}, message="second")
    head = hub.commit(REPO, {"onnx/extra.onnx": b"only in the newest commit"}, message="third")
    assert len({old, new, head}) == 3 and head == hub.head(REPO)
    return {"old": (old, old_bytes), "new": (new, new_bytes), "head": (head, new_bytes)}


def _fetch(
    hub: LocalHub,
    uri: str,
    dest: Path,
    *,
    credentials_dir: Path | None = None,
    credentials_secret: str | None = None,
    max_bytes: int = 1 << 30,
) -> HfFetched:
    return fetch_hf(
        uri,
        dest,
        endpoint=hub.endpoint,
        credentials_dir=credentials_dir,
        credentials_secret=credentials_secret,
        ca_bundle=None,
        timeout_s=10.0,
        max_bytes=max_bytes,
    )


def _credentials(tmp_path: Path, token: str | None) -> Path:
    """A Secret's keys mounted as files, as the kubelet writes them (a trailing newline kept)."""
    mounted = tmp_path / "credentials"
    mounted.mkdir()
    if token is not None:
        (mounted / "HF_TOKEN").write_text(token + "\n")
    return mounted


# --- against olah ---------------------------------------------------------------------------------


def test_fetch_by_branch_records_head_commit(
    hub: LocalHub, versions: dict[str, tuple[str, bytes]], tmp_path: Path
) -> None:
    commit, data = versions["head"]  # the commit main names, not the one that last changed the file
    for uri in (f"hf://{REPO}/{PATH}", f"hf://{REPO}@main/{PATH}"):
        dest = tmp_path / "model.onnx"
        fetched = _fetch(hub, uri, dest)
        assert dest.read_bytes() == data
        assert fetched.sha256 == hashlib.sha256(data).hexdigest()
        assert fetched.size == len(data)
        assert fetched.commit == commit == hub.head(REPO)


def test_a_build_from_the_hub_fetches_at_a_commit_and_records_it(
    hub: LocalHub,
    versions: dict[str, tuple[str, bytes]],
    make_request: Callable[..., BuildRequest],
) -> None:
    """Through the build's own fetch: the branch resolved, the commit on the result (status.engine)."""
    commit, data = versions["head"]
    result = run_build(
        make_request(model_uri=f"hf://{REPO}/{PATH}", hf_endpoint=hub.endpoint),
        BuildSettings(),
        progress=print,
    )
    assert result.outcome == BuildOutcome.SUCCEEDED, result.message
    assert (result.model_sha256, result.model_revision) == (hashlib.sha256(data).hexdigest(), commit)


def test_fetch_pinned_older_commit_gives_older_bytes(
    hub: LocalHub, versions: dict[str, tuple[str, bytes]], tmp_path: Path
) -> None:
    commit, data = versions["old"]
    dest = tmp_path / "model.onnx"
    fetched = _fetch(hub, f"hf://{REPO}@{commit.upper()}/{PATH}", dest)  # commit ids are case-blind
    assert dest.read_bytes() == data != versions["new"][1]
    assert fetched.commit == commit
    assert fetched.sha256 == hashlib.sha256(data).hexdigest()


def test_token_is_read_and_sent_without_harm(
    hub: LocalHub, versions: dict[str, tuple[str, bytes]], tmp_path: Path
) -> None:
    """olah checks no token: this shows only that a named Secret's token is read and the fetch works."""
    dest = tmp_path / "model.onnx"
    fetched = _fetch(
        hub,
        f"hf://{REPO}/{PATH}",
        dest,
        credentials_dir=_credentials(tmp_path, TOKEN),
        credentials_secret=SECRET,
    )
    assert fetched.commit == versions["head"][0]
    assert dest.read_bytes() == versions["head"][1]


def test_missing_file_is_not_found(
    hub: LocalHub, versions: dict[str, tuple[str, bytes]], tmp_path: Path
) -> None:
    dest = tmp_path / "model.onnx"
    uri = f"hf://{REPO}/onnx/absent.onnx"
    with pytest.raises(BuildError) as caught:
        _fetch(hub, uri, dest, credentials_dir=_credentials(tmp_path, TOKEN), credentials_secret=SECRET)
    assert caught.value.reason == MODEL_NOT_FOUND
    assert "EntryNotFound" in caught.value.message and uri in caught.value.message
    assert TOKEN not in str(caught.value)
    assert not dest.exists()


def test_file_only_in_newer_commit_is_not_found_at_older(
    hub: LocalHub, versions: dict[str, tuple[str, bytes]], tmp_path: Path
) -> None:
    with pytest.raises(BuildError) as caught:
        _fetch(hub, f"hf://{REPO}@{versions['new'][0]}/onnx/extra.onnx", tmp_path / "m.onnx")
    assert caught.value.reason == MODEL_NOT_FOUND
    fetched = _fetch(hub, f"hf://{REPO}/onnx/extra.onnx", tmp_path / "m.onnx")
    assert fetched.commit == versions["head"][0]
    assert (tmp_path / "m.onnx").read_bytes() == b"only in the newest commit"


@pytest.mark.parametrize(
    "uri",
    [f"hf://acme/absent/{PATH}", f"hf://{REPO}@no-such-branch/{PATH}"],
    ids=["repository", "revision"],
)
def test_missing_repository_or_revision_is_not_found(
    hub: LocalHub, versions: dict[str, tuple[str, bytes]], tmp_path: Path, uri: str
) -> None:
    dest = tmp_path / "model.onnx"
    with pytest.raises(BuildError) as caught:
        _fetch(hub, uri, dest)
    # The Hub (and olah) answer 401 RepoNotFound: missing, or private to this caller.
    assert caught.value.reason == MODEL_NOT_FOUND
    assert "RepoNotFound" in caught.value.message and "no token was sent" in caught.value.message
    assert not dest.exists()


def test_named_secret_without_token_is_credentials_missing(hub: LocalHub, tmp_path: Path) -> None:
    dest = tmp_path / "model.onnx"
    for token in (None, ""):
        mounted = tmp_path / f"case-{token!r}"
        mounted.mkdir()
        if token is not None:
            (mounted / "HF_TOKEN").write_text("\n")
        with pytest.raises(BuildError) as caught:
            _fetch(hub, f"hf://{REPO}/{PATH}", dest, credentials_dir=mounted, credentials_secret=SECRET)
        assert caught.value.reason == MODEL_CREDENTIALS_MISSING
        assert SECRET in caught.value.message and "HF_TOKEN" in caught.value.message
        assert not dest.exists()


def test_stated_size_above_bound_is_too_large(
    hub: LocalHub, versions: dict[str, tuple[str, bytes]], tmp_path: Path
) -> None:
    dest = tmp_path / "model.onnx"
    with pytest.raises(BuildError) as caught:
        _fetch(hub, f"hf://{REPO}/{PATH}", dest, max_bytes=len(versions["new"][1]) - 1)
    assert caught.value.reason == MODEL_TOO_LARGE
    assert f"is {len(versions['new'][1])} bytes" in caught.value.message  # refused before the download
    assert not dest.exists()


def test_nothing_listening_is_unreachable(tmp_path: Path) -> None:
    dest = tmp_path / "model.onnx"
    with pytest.raises(BuildError) as caught:
        fetch_hf(
            f"hf://{REPO}/{PATH}",
            dest,
            endpoint=f"http://127.0.0.1:{free_port()}",
            credentials_dir=None,
            credentials_secret=None,
            ca_bundle=None,
            timeout_s=5.0,
        )
    assert caught.value.reason == MODEL_UNREACHABLE
    assert not dest.exists()


# --- huggingface.co's answers, recorded requests (no server) -------------------------------------

HUB = "https://hub.example.invalid"
CDN = "https://cdn.example.invalid"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
DATA = b"onnx bytes from the CDN"


def _hub_like(
    *, data: bytes = DATA, commit: str = COMMIT, etag: str | None = None
) -> tuple[Callable[[httpx.Request], httpx.Response], list[httpx.Request]]:
    """Answers as huggingface.co gives them for an LFS file: the resolve URL redirects to the CDN."""
    seen: list[httpx.Request] = []
    sha = etag or hashlib.sha256(DATA).hexdigest()

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        url = str(request.url)
        if url.startswith(f"{HUB}/api/models/{REPO}/revision/"):
            return httpx.Response(200, json={"id": REPO, "sha": commit})
        if url == f"{HUB}/{REPO}/resolve/{COMMIT}/{PATH}":
            return httpx.Response(
                302,
                headers={
                    "Location": f"{CDN}/repos/ab/cd/{sha}?X-Amz-Signature=s3cr3t",
                    "X-Repo-Commit": commit,
                    "X-Linked-Etag": f'"{sha}"',
                    "X-Linked-Size": str(len(data)),
                    "ETag": '"W/not-the-file"',
                    "Content-Length": "1234",
                },
            )
        if url.startswith(f"{CDN}/repos/"):
            return httpx.Response(200, content=data)
        return httpx.Response(404, headers={"X-Error-Code": "EntryNotFound"})

    return answer, seen


def _fetch_with(answer: Callable[[httpx.Request], httpx.Response], uri: str, dest: Path) -> HfFetched:
    with httpx.Client(transport=httpx.MockTransport(answer), follow_redirects=False) as client:
        return fetch_hf_with(client, uri, dest, endpoint=HUB, token=TOKEN, credentials_secret=SECRET)


def test_cdn_redirect_drops_token_and_verifies_linked_sha256(tmp_path: Path) -> None:
    answer, seen = _hub_like()
    fetched = _fetch_with(answer, f"hf://{REPO}/{PATH}", tmp_path / "m.onnx")
    assert (tmp_path / "m.onnx").read_bytes() == DATA
    assert fetched.commit == COMMIT
    assert [(r.method, r.url.host) for r in seen] == [
        ("GET", "hub.example.invalid"),
        ("HEAD", "hub.example.invalid"),  # the redirect's headers are read, the redirect not followed
        ("GET", "hub.example.invalid"),
        ("GET", "cdn.example.invalid"),
    ]
    for request in seen:
        sent = request.headers.get("authorization")
        assert sent == (f"Bearer {TOKEN}" if request.url.host == "hub.example.invalid" else None)


def test_bytes_not_hashing_to_linked_etag_are_a_mismatch(tmp_path: Path) -> None:
    answer, _ = _hub_like(data=b"tampered bytes")
    with pytest.raises(BuildError) as caught:
        _fetch_with(answer, f"hf://{REPO}/{PATH}", tmp_path / "m.onnx")
    assert caught.value.reason == MODEL_CHECKSUM_MISMATCH
    assert not (tmp_path / "m.onnx").exists()


def test_pinned_commit_answered_for_another_is_a_mismatch(tmp_path: Path) -> None:
    answer, _ = _hub_like(commit="f" * 40)
    with pytest.raises(BuildError) as caught:
        _fetch_with(answer, f"hf://{REPO}@{COMMIT}/{PATH}", tmp_path / "m.onnx")
    assert caught.value.reason == MODEL_CHECKSUM_MISMATCH


def test_redirect_to_plain_http_is_refused(tmp_path: Path) -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        if "/api/models/" in str(request.url):
            return httpx.Response(200, json={"sha": COMMIT})
        if request.url.host == "hub.example.invalid":
            return httpx.Response(302, headers={"Location": "http://cdn.example.invalid/x"})
        return httpx.Response(200, content=DATA)

    with pytest.raises(BuildError) as caught:
        _fetch_with(answer, f"hf://{REPO}/{PATH}", tmp_path / "m.onnx")
    assert caught.value.reason == MODEL_UNREACHABLE and "https to http" in caught.value.message


@pytest.mark.parametrize(
    ("status", "headers", "reason"),
    [
        (403, {"X-Error-Code": "GatedRepo"}, MODEL_ACCESS_DENIED),
        (401, {"X-Error-Message": "Invalid credentials in Authorization header"}, MODEL_ACCESS_DENIED),
        (401, {"X-Error-Code": "RepoNotFound"}, MODEL_NOT_FOUND),
        (404, {"X-Error-Code": "RevisionNotFound"}, MODEL_NOT_FOUND),
        (503, {}, MODEL_UNREACHABLE),
    ],
)
def test_hub_refusals(tmp_path: Path, status: int, headers: dict[str, str], reason: str) -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, headers=headers)

    with pytest.raises(BuildError) as caught:
        _fetch_with(answer, f"hf://{REPO}/{PATH}", tmp_path / "m.onnx")
    assert caught.value.reason == reason
    assert TOKEN not in str(caught.value)


# --- pure -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("hf://acme/mlp/model.onnx", HfLocation("acme/mlp", "main", "model.onnx")),
        ("hf://acme/mlp@v1.2/onnx/fp32/model.onnx", HfLocation("acme/mlp", "v1.2", "onnx/fp32/model.onnx")),
        (f"hf://Acme-Org/m.l_p@{COMMIT.upper()}/m.onnx", HfLocation("Acme-Org/m.l_p", COMMIT, "m.onnx")),
        # A revision holds no '/': a pull request's ref reads as revision "refs" and a longer path.
        ("hf://acme/mlp@refs/pr/1/model.onnx", HfLocation("acme/mlp", "refs", "pr/1/model.onnx")),
    ],
)
def test_parse_good_uris(uri: str, expected: HfLocation) -> None:
    assert parse_hf_uri(uri) == expected
    assert parse_hf_uri(uri).pinned == (expected.revision == COMMIT)


@pytest.mark.parametrize(
    "uri",
    [
        "https://huggingface.co/acme/mlp/resolve/main/model.onnx",
        "hf://acme/mlp",  # no path
        "hf://mlp/model.onnx",  # no organization
        "hf://acme/mlp@/model.onnx",  # empty revision
        "hf://acme/mlp@main..x/model.onnx",
        "hf://acme/mlp//model.onnx",
        "hf://acme/mlp/../secrets.onnx",
        "hf://acme/mlp/a%2F..%2Fb.onnx",
        "hf://acme/mlp/model.onnx?download=1",
        "hf://ac me/mlp/model.onnx",
        "hf://user:pw@acme/mlp/model.onnx",
    ],
)
def test_parse_bad_uris(uri: str) -> None:
    with pytest.raises(BuildError) as caught:
        parse_hf_uri(uri)
    assert caught.value.reason == UNSUPPORTED_URI


def test_parse_endpoint() -> None:
    assert parse_endpoint(None) == "https://huggingface.co"
    assert parse_endpoint("https://hub.corp:8443/hf/") == "https://hub.corp:8443/hf"
    for bad in ("ftp://hub", "https://user:pw@hub", "https://hub?x=1", "https://hub:99999"):
        with pytest.raises(BuildError) as caught:
            parse_endpoint(bad)
        assert caught.value.reason == UNSUPPORTED_URI
        assert "pw" not in caught.value.message


def test_read_file_headers() -> None:
    sha = "a" * 64
    lfs = read_file_headers(
        {"X-Linked-Etag": f'"{sha}"', "X-Linked-Size": "42", "X-Repo-Commit": COMMIT.upper(), "ETag": '"x"'},
        redirected=True,
    )
    assert (lfs.sha256, lfs.git_blob, lfs.size, lfs.commit) == (sha, None, 42, COMMIT)
    plain = read_file_headers({"etag": 'W/"' + "b" * 40 + '"', "content-length": "7"}, redirected=False)
    assert (plain.sha256, plain.git_blob, plain.size, plain.commit) == (None, "b" * 40, 7, None)
    redirect = read_file_headers({"content-length": "7", "etag": "c" * 64}, redirected=True)
    assert (redirect.sha256, redirect.size) == ("c" * 64, None)  # a redirect's length is not the file's


def test_refusal_reason() -> None:
    assert refusal_reason(401, "RepoNotFound", None) == MODEL_NOT_FOUND
    assert refusal_reason(404, "EntryNotFound", None) == MODEL_NOT_FOUND
    assert refusal_reason(401, None, None) == MODEL_ACCESS_DENIED
    assert refusal_reason(403, "GatedRepo", None) == MODEL_ACCESS_DENIED
    assert refusal_reason(410, None, None) == MODEL_NOT_FOUND
    assert refusal_reason(500, None, None) == MODEL_UNREACHABLE
