"""A Hugging Face Hub stand-in on 127.0.0.1 for tests: olah, serving local git repositories offline.

olah (PyPI `olah`, a self-hosted Hub mirror) implements the Hub's HTTP API that huggingface_hub
clients use. With `mirrors-path` it serves local git repositories (`<mirrors>/models/ORG/REPO`) as
Hub repositories, and with `offline = true` it never contacts huggingface.co: the revision API
(`/api/models/ORG/REPO/revision/REV`, the commit as `sha`), the resolve endpoint
(`/ORG/REPO/resolve/REV/PATH`, HEAD with `X-Repo-Commit` and `ETag`), and the Hub's error answers
(401 `X-Error-Code: RepoNotFound`, 404 `EntryNotFound`). An LFS file is stored as git-lfs stores it
(a pointer file committed, its bytes under `.git/lfs/objects/`), and olah states its sha256 as the
ETag, as the Hub does. olah itself checks no token (it forwards the caller's to huggingface.co,
which offline it never asks).

`bash e2e/install-olah.sh` installs it into its own venv, outside the repository and the project's
.venv (`$TAILPILOT_CACHE/tools/olah-<version>`).

    hub = LocalHub(tmp_dir).start()
    old = hub.commit("acme/mlp", {"onnx/model.onnx": data_v1}, lfs=False)
    new = hub.commit("acme/mlp", {"onnx/model.onnx": data_v2})   # an LFS file
    ... hub.endpoint ...
    hub.stop()
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tailpilot.builders.triton_server import free_port
from tailpilot_e2e.config import cache_dir, read_versions
from tailpilot_e2e.procs import Component, pid_runs, read_pid, start, stop

#: olah's version (`e2e/install-olah.sh` installs it, its dependencies pinned by e2e/olah-constraints.txt).
OLAH_VERSION = read_versions()["OLAH_VERSION"]
#: Name of the process (its PID file and log under the state directory).
NAME = "olah"
#: What `.gitattributes` says of LFS files (as `git lfs track "*.onnx"` writes it).
LFS_ATTRIBUTES = "*.onnx filter=lfs diff=lfs merge=lfs -text\n"
#: The git author and committer of the commits made here (no global git configuration is read).
_GIT_ENV = {
    "GIT_AUTHOR_NAME": "tailpilot-tests",
    "GIT_AUTHOR_EMAIL": "tests@tailpilot.invalid",
    "GIT_COMMITTER_NAME": "tailpilot-tests",
    "GIT_COMMITTER_EMAIL": "tests@tailpilot.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
}


def olah_cli(cache: Path | None = None) -> Path:
    """Where `e2e/install-olah.sh` puts olah's command line."""
    return (cache or cache_dir()) / "tools" / f"olah-{OLAH_VERSION}" / "bin" / "olah-cli"


def lfs_pointer(data: bytes) -> bytes:
    """The git-lfs pointer file of `data` (spec v1)."""
    oid = hashlib.sha256(data).hexdigest()
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize {len(data)}\n".encode()


@dataclass
class LocalHub:
    """One olah process on 127.0.0.1, its mirrored repositories, cache, PID file and log under `state`."""

    state: Path
    binary: Path | None = None
    port: int = 0

    @property
    def endpoint(self) -> str:
        """`http://127.0.0.1:PORT`."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def mirrors(self) -> Path:
        """The folder olah serves repositories from: `<mirrors>/models/ORG/REPO` is the model ORG/REPO."""
        return self.state / "mirrors"

    def repo_dir(self, repo_id: str) -> Path:
        """The git working tree of model repository `repo_id`."""
        return self.mirrors / "models" / repo_id

    def start(self, *, timeout_s: float = 60.0) -> LocalHub:
        """Start olah on a free port, offline, and wait (bounded) until it answers HTTP."""
        binary = self.binary or olah_cli()
        if not binary.is_file():
            raise FileNotFoundError(
                f"{binary}: olah is missing; `bash e2e/install-olah.sh` installs it (its own venv, cached)"
            )
        self.binary = binary
        self.port = free_port()
        self.mirrors.mkdir(parents=True, exist_ok=True)
        config = self.state / "olah.toml"
        config.write_text(
            "[basic]\n"
            'host = "127.0.0.1"\n'
            f"port = {self.port}\n"
            f'repos-path = "{self.state / "cache"}"\n'
            f'mirrors-path = ["{self.mirrors}"]\n'
            "[accessibility]\n"
            "offline = true\n"
        )
        start(
            Component(
                name=NAME,
                argv=[str(binary), "--config", str(config), "--log-path", str(self.state / "logs" / "olah")],
                ports=[self.port],
                is_ready=self._answers,
                ready_timeout_s=timeout_s,
                # olah's venv alone: nothing of the test process's Python paths.
                env={"PYTHONPATH": "", "PYTHONNOUSERSITE": "1"},
            ),
            state=self.state,
        )
        return self

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(
                f"{self.endpoint}/api/models/tailpilot/ready/revision/main", timeout=2
            ):
                return True
        except urllib.error.HTTPError:
            return True  # an HTTP answer, whatever its status: the server listens
        except (urllib.error.URLError, OSError):
            return False

    def commit(
        self, repo_id: str, files: dict[str, bytes], *, lfs: bool = True, message: str = "update"
    ) -> str:
        """Commit `files` (path in the repository -> bytes) to `main` of `repo_id`; the new commit id.

        The repository is created (git, branch main) on first use. With `lfs`, `*.onnx` files are
        stored as git-lfs stores them: the pointer committed, the bytes under `.git/lfs/objects/`.
        """
        repo = self.repo_dir(repo_id)
        if not (repo / ".git").is_dir():
            repo.mkdir(parents=True, exist_ok=True)
            self._git(repo, "init", "--quiet", "--initial-branch=main")
            (repo / ".gitattributes").write_text(LFS_ATTRIBUTES)
        for name, data in files.items():
            path = repo / name
            path.parent.mkdir(parents=True, exist_ok=True)
            if lfs and name.endswith(".onnx"):
                oid = hashlib.sha256(data).hexdigest()
                obj = repo / ".git" / "lfs" / "objects" / oid[:2] / oid[2:4] / oid
                obj.parent.mkdir(parents=True, exist_ok=True)
                obj.write_bytes(data)
                path.write_bytes(lfs_pointer(data))
            else:
                path.write_bytes(data)
        self._git(repo, "add", "--all")
        self._git(repo, "commit", "--quiet", "--allow-empty", "-m", message)
        return self.head(repo_id)

    def head(self, repo_id: str, ref: str = "main") -> str:
        """The commit `ref` of `repo_id` names."""
        return self._git(self.repo_dir(repo_id), "rev-parse", ref).strip()

    @staticmethod
    def _git(repo: Path, *args: str) -> str:
        result = subprocess.run(  # noqa: S603 - our own argv
            ["git", "-C", str(repo), *args],  # noqa: S607 - git from the PATH
            check=True,
            capture_output=True,
            text=True,
            env={**os.environ, **_GIT_ENV},
            timeout=30,
        )
        return result.stdout

    def running(self) -> bool:
        """Whether olah's process (by its PID file) still runs."""
        pid = read_pid(self.state / f"{NAME}.pid")
        return pid is not None and pid_runs(pid, str(self.binary))

    def stop(self) -> None:
        """Stop olah by its PID (SIGTERM, then SIGKILL after a grace period)."""
        stop(NAME, state=self.state, binary=str(self.binary) if self.binary else None)
