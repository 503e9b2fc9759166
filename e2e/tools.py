"""Small maintenance commands used by the Makefile.

python -m tailpilot_e2e.tools link-binaries DIR   # symlink the cached cluster binaries into DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

from tailpilot_e2e.config import Binaries


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


def main(argv: list[str]) -> int:
    """Dispatch the maintenance command."""
    if len(argv) == 2 and argv[0] == "link-binaries":
        link_binaries(Path(argv[1]))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
