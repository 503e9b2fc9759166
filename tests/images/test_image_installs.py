"""Each image's Python install, run outside Docker: every module its entry points need imports.

There is no Docker engine here, so the test does what the Dockerfile's build stage does, minus
the base image: it copies what the stage's COPY lines copy into a temporary /src, runs the
stage's `docker/install-python.sh` command there into a fresh venv, then, in that venv, runs every
import statement of every module reachable from the image's `tailpilot` subcommands (imports
inside functions included: the CLI loads its subcommands lazily, and the build its heavy modules)
and `tailpilot <subcommand> --help`.

What differs from the image: the interpreter is this machine's Python 3.11 (the test's own), not
python:3.11-slim's nor the standalone CPython 3.11 uv installs in the builder image; and the
builder's INSTALLER=uv becomes pip where uv is not on PATH (same packages, same lock).
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

from tailpilot import cli, crdgen

REPO = crdgen.REPO_ROOT
SCRIPT = "docker/install-python.sh"

#: image -> the `tailpilot` subcommands it runs: the operator Deployment's, the build Job's.
IMAGE_COMMANDS: dict[str, tuple[str, ...]] = {
    "operator": ("operator", "crds"),
    "builder": ("build", "profile", "make-example-model"),
}
#: image -> the modules it runs with `python -P -m` (the chart's activator Deployment, in the operator image).
IMAGE_MODULES: dict[str, tuple[str, ...]] = {
    "operator": ("tailpilot.activator",),
    "builder": (),
}
#: Installed by venv / uv venv, or the project itself: not pinned in requirements.lock.
UNPINNED_OK = {"pip", "setuptools", "wheel", "tailpilot"}


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _lock() -> dict[str, str]:
    pins = {}
    for line in (REPO / "requirements.lock").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, version = line.split("==")
            pins[_canonical(name)] = version.strip()
    return pins


# --- the Dockerfile's build stage -------------------------------------------------------------


@dataclass
class BuildStage:
    """The COPY lines up to the install RUN, and that RUN's install-python.sh command."""

    workdir: str
    copies: list[tuple[list[str], str]]
    install: list[str]


def _instructions(text: str) -> list[tuple[str, str]]:
    joined = re.sub(r"\\\n", " ", text)
    out = []
    for line in joined.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            keyword, _, rest = line.strip().partition(" ")
            out.append((keyword.upper(), rest.strip()))
    return out


def parse_build_stage(dockerfile: Path) -> BuildStage:
    workdir, copies = "/", []
    for keyword, rest in _instructions(dockerfile.read_text()):
        if keyword == "FROM":
            workdir, copies = "/", []
        elif keyword == "WORKDIR":
            workdir = rest
        elif keyword == "COPY" and not rest.startswith("--"):
            *sources, dest = rest.split()
            copies.append((sources, dest))
        elif keyword == "RUN" and SCRIPT in rest:
            (command,) = [c for c in rest.split("&&") if SCRIPT in c]
            return BuildStage(workdir, copies, shlex.split(command))
    raise AssertionError(f"{dockerfile.name}: no RUN calls {SCRIPT}")


def copy_context(stage: BuildStage, src_root: Path) -> None:
    """Do the stage's COPY lines from the repository into src_root (standing for WORKDIR)."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for sources, dest in stage.copies:
        assert not dest.startswith("/"), f"COPY to {dest}: the test only copies relative to WORKDIR"
        target = src_root / dest
        for src in sources:
            path = REPO / src
            if path.is_dir():
                shutil.copytree(path, target, ignore=ignore, dirs_exist_ok=True)
            elif dest.endswith("/") or len(sources) > 1:
                target.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, target / path.name)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, target)


# --- what the entry points import -------------------------------------------------------------


def _package_dirs() -> dict[str, Path]:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    dirs = pyproject["tool"]["setuptools"]["package-dir"]
    return {pkg: REPO / folder for pkg, folder in sorted(dirs.items(), key=lambda kv: -len(kv[0]))}


PACKAGE_DIRS = _package_dirs()


def module_file(name: str) -> Path | None:
    """The source file of a first-party module (pyproject's package-dir mapping), else None."""
    for pkg, folder in PACKAGE_DIRS.items():
        if name == pkg or name.startswith(pkg + "."):
            base = folder.joinpath(*name[len(pkg) :].split(".")[1:])
            for candidate in (base / "__init__.py", base.with_suffix(".py")):
                if candidate.is_file():
                    return candidate
            return None
    return None


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _catches_import_error(node: ast.Try) -> bool:
    names = {"ImportError", "ModuleNotFoundError"}
    for handler in node.handlers:
        types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        if any(isinstance(t, ast.Name) and t.id in names for t in types):
            return True
    return False


def import_statements(path: Path, module: str) -> list[ast.Import | ast.ImportFrom]:
    """Every import a module runs, at any depth, except under `if TYPE_CHECKING:` and in a
    `try:` whose ImportError is handled (an optional dependency)."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            children: list[ast.AST] = list(node.orelse)
        elif isinstance(node, ast.Try) and _catches_import_error(node):
            children = [*node.handlers, *node.orelse, *node.finalbody]
        else:
            if isinstance(node, ast.Import):
                found.append(node)
            elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
                if node.level:  # relative: make it absolute, as the statement is run elsewhere
                    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
                    base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    node = ast.ImportFrom(f"{base}.{node.module}" if node.module else base, node.names, 0)
                found.append(node)
            children = list(ast.iter_child_nodes(node))
        for child in children:
            visit(child)

    visit(ast.parse(path.read_text(), str(path)))
    return found


def reachable(entry_modules: list[str]) -> tuple[list[str], list[str]]:
    """First-party modules reachable from the entry modules, and every import statement they run."""
    seen: set[str] = set()
    statements: set[str] = set()
    todo = list(entry_modules)
    while todo:
        name = todo.pop()
        path = module_file(name)
        if name in seen or path is None:
            continue
        seen.add(name)
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]  # parent packages run first
        for node in import_statements(path, name):
            statements.add(ast.unparse(node))
            if isinstance(node, ast.Import):
                todo += [alias.name for alias in node.names]
            elif node.module:
                todo.append(node.module)
                todo += [f"{node.module}.{alias.name}" for alias in node.names]  # submodules
    return sorted(seen), sorted(statements)


CHECK = """
import importlib.metadata, json, sys, traceback
failures = []
for statement in json.load(sys.stdin):
    try:
        exec(statement, {})
    except BaseException as exc:
        failures.append(f"{statement}: {type(exc).__name__}: {exc}")
dists = {d.metadata["Name"]: d.version for d in importlib.metadata.distributions()}
print(json.dumps({"failures": failures, "dists": dists}))
"""


# --- the tests --------------------------------------------------------------------------------


def test_the_walk_reaches_lazy_imports() -> None:
    """The static walk must see function-level imports, or the venv check below proves little."""
    modules, statements = reachable(["tailpilot.builders.cli"])
    assert {"tailpilot.builders.build", "tailpilot.builders.ort_build", "tailpilot.builders.fetch"} <= set(
        modules
    )
    assert "import httpx" in statements  # inside a function of fetch.py
    assert any(s.startswith("from onnxruntime.quantization import") for s in statements)
    # The object-store client of the s3:// source (the builder image installs the sources extra).
    assert any(s.startswith("from minio import") for s in statements)


@pytest.mark.slow
@pytest.mark.timeout(1500)
@pytest.mark.parametrize("image", sorted(IMAGE_COMMANDS))
def test_image_install_imports_every_entry_point_module(image: str, tmp_path: Path) -> None:
    stage = parse_build_stage(REPO / f"docker/{image}.Dockerfile")
    assert stage.workdir == "/src"
    *assignments, shell, script, image_arg, _image_venv = stage.install
    assert (shell, script, image_arg) == ("sh", SCRIPT, image), stage.install
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"}}
    env.update(a.split("=", 1) for a in assignments)
    # This machine's Python 3.11 in place of the image's; uv only where it is installed.
    env["PYTHON"] = sys.executable
    if env.get("INSTALLER") == "uv" and shutil.which("uv") is None:
        env["INSTALLER"] = "pip"

    src, venv = tmp_path / "src", tmp_path / "venv"
    copy_context(stage, src)
    started = time.monotonic()
    install = subprocess.run(
        ["sh", SCRIPT, image, str(venv)], cwd=src, env=env, capture_output=True, text=True, timeout=1200
    )
    assert install.returncode == 0, (
        f"{image}: install failed:\n{install.stdout[-3000:]}{install.stderr[-3000:]}"
    )
    print(f"{image}: installed with {env.get('INSTALLER', 'pip')} in {time.monotonic() - started:.0f} s")

    entry_modules = ["tailpilot.cli"] + [cli.SUBCOMMANDS[c][0] for c in IMAGE_COMMANDS[image]]
    entry_modules += [f"{module}.__main__" for module in IMAGE_MODULES[image]]
    modules, statements = reachable(entry_modules)
    python = venv / "bin" / "python"
    # -I: neither the repository (cwd) nor PYTHONPATH may supply a module the venv lacks.
    check = subprocess.run(
        [str(python), "-I", "-c", CHECK],
        # A `__main__` runs its program when imported: its imports are checked, not the module itself.
        input=json.dumps([f"import {m}" for m in modules if not m.endswith(".__main__")] + statements),
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert check.returncode == 0, check.stderr[-3000:]
    result = json.loads(check.stdout.splitlines()[-1])
    assert result["failures"] == [], f"{image}: imports that fail in the image's venv:\n" + "\n".join(
        result["failures"]
    )

    pins = _lock()
    installed = {_canonical(n): v for n, v in result["dists"].items()}
    unpinned = sorted(
        f"{n}=={v} (lock: {pins.get(n, 'absent')})"
        for n, v in installed.items()
        if n not in UNPINNED_OK and pins.get(n) != v
    )
    assert unpinned == [], f"{image}: installed but not pinned in requirements.lock: {unpinned}"
    if image == "operator":
        assert "nvidia-pytriton" not in installed, "the operator image must not need the triton extra"

    tailpilot = str(venv / "bin" / "tailpilot")
    for args in [["--help"], *([c, "--help"] for c in IMAGE_COMMANDS[image])]:
        run = subprocess.run(
            [tailpilot, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )
        assert run.returncode == 0, f"tailpilot {' '.join(args)}: {run.stdout[-1500:]}{run.stderr[-1500:]}"
    for module in IMAGE_MODULES[image]:
        run = subprocess.run(
            [str(python), "-P", "-m", module, "--help"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert run.returncode == 0, f"python -P -m {module}: {run.stdout[-1500:]}{run.stderr[-1500:]}"
