#!/usr/bin/env bash
# Install olah (a self-hosted Hugging Face Hub mirror, PyPI `olah`) idempotently and print its CLI's path.
#
# The hf:// model tests (tests/builders/test_builder_fetch_hf.py) serve local git repositories through
# it, as a Hub would. Its dependencies (fastapi, GitPython, huggingface_hub, ...) stay out of the
# project's .venv: olah gets its own venv under ${TAILPILOT_CACHE:-$HOME/.cache/tailpilot}/tools/olah-<ver>,
# keyed by version, every package pinned by e2e/olah-constraints.txt. A second run only prints the path.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "${here}/versions.env"
version="${OLAH_VERSION}"
constraints="${here}/olah-constraints.txt"
cache="${TAILPILOT_CACHE:-${HOME}/.cache/tailpilot}"
dest="${cache}/tools/olah-${version}"
cli="${dest}/bin/olah-cli"

# The constraints' digest is recorded, so that changing a pin reinstalls.
want="${version} $(sha256sum "${constraints}" | cut -d' ' -f1)"
if [[ -x "${cli}" && -f "${dest}/.installed" && "$(cat "${dest}/.installed")" == "${want}" ]] \
  && "${dest}/bin/python" -I -c 'import olah.server' >/dev/null 2>&1; then
  echo "${cli}"
  exit 0
fi

python="${PYTHON:-python3}"
command -v "${python}" >/dev/null || { echo "install-olah: ${python} is required" >&2; exit 1; }

# A venv is not relocatable (its scripts name its own path): it is built in place, and marked
# installed only once complete, so an interrupted run is redone by the next one.
rm -rf "${dest}"
mkdir -p "${cache}/tools"
"${python}" -m venv "${dest}" >/dev/null
"${dest}/bin/pip" install --quiet --disable-pip-version-check \
  --constraint "${constraints}" "olah==${version}" >&2
"${dest}/bin/python" -I -c 'import olah.server' >/dev/null
echo "${want}" > "${dest}/.installed"
echo "${cli}"
