"""Small maintenance commands used by the Makefile.

python -m tailpilot_e2e.tools link-binaries DIR   # symlink the cached cluster binaries into DIR
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from tailpilot_e2e.config import REPO_ROOT, Binaries


def link_binaries(target: Path) -> list[Path]:
    """Symlink every cached binary into `target` (e.g. .venv/bin) so PATH finds them."""
    binaries = Binaries.from_cache()
    missing = binaries.missing()
    if missing:
        raise SystemExit(f"missing binaries: {', '.join(map(str, missing))} (run e2e/build-binaries.sh)")
    links = []
    for path in vars(binaries).values():
        link = target / path.name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(path)
        links.append(link)
    return links


#: Folder -> import package, as pyproject.toml's package-dir maps them.
PACKAGE_DIRS = {
    "controllers": "controllers",
    "tools": "tools",
    "builders": "builders",
    "bench": "bench",
    "activator": "activator",
}


def link_source_tree(target: Path) -> Path:
    """Lay the `tailpilot` package out as one directory tree of symlinks under `target`.

    The editable install maps seven folders into one package with an import hook
    that static tools (mypy, import-linter) cannot follow; pointed at this tree
    (MYPYPATH / PYTHONPATH) they see the package exactly as Python imports it.
    """
    root = REPO_ROOT
    package = target / "tailpilot"
    if package.exists():
        shutil.rmtree(package)
    package.mkdir(parents=True)
    for entry in (root / "operator").iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    for folder, name in PACKAGE_DIRS.items():
        (package / name).symlink_to(root / folder)
    return package


def main(argv: list[str]) -> int:
    """Dispatch the maintenance command."""
    if len(argv) == 2 and argv[0] == "link-binaries":
        link_binaries(Path(argv[1]))
        return 0
    if len(argv) == 2 and argv[0] == "link-source-tree":
        print(link_source_tree(Path(argv[1])).parent)
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
