#!/bin/sh
# The Python environment of each image, in one place. docker/operator.Dockerfile and
# docker/builder.Dockerfile run this in their build stage (on their copy of the repository), and
# tests/images/test_image_installs.py runs it too, into a fresh venv, then imports every module
# the image's entry points reach and runs `tailpilot ... --help` there.
#
#   sh docker/install-python.sh operator|builder VENV
#
# Every version comes from requirements.lock (`-c`: constraints, the .venv's `pip freeze`), so an
# image runs the versions the tests ran; the test fails when an image installs a package the
# lock does not pin.
#
# Environment:
#   INSTALLER  pip (default: `PYTHON -m venv`, then pip) or uv (`uv venv`, then `uv pip`)
#   PYTHON     the interpreter of the venv: a path or command (pip; default python3), or a
#              version uv finds or has installed (uv; default 3.11)
set -eu

usage="usage: install-python.sh operator|builder VENV"
image=${1:?$usage}
venv=${2:?$usage}
src=$(cd "$(dirname "$0")/.." && pwd)

case $image in
  # The operator: the project's own dependencies only (kopf, the kubernetes client, tritonclient's
  # grpc/http clients for Triton's model-config protobuf and live batching); not the triton extra.
  operator) set -- "$src" ;;
  # The build Job: the same, plus the sources extra (minio: the s3:// models' client) and
  # tritonclient[all] (its perf_analyzer and CUDA shared-memory utilities; the version is the
  # lock's). Triton itself is the base image's, not the triton extra.
  builder) set -- "$src[sources]" "tritonclient[all]" ;;
  *) echo "install-python.sh: unknown image '$image' (operator or builder)" >&2; exit 2 ;;
esac

case ${INSTALLER:-pip} in
  pip)
    "${PYTHON:-python3}" -m venv "$venv"
    "$venv/bin/pip" install --no-input -c "$src/requirements.lock" "$@"
    ;;
  uv)
    uv venv --python "${PYTHON:-3.11}" "$venv"
    VIRTUAL_ENV=$venv uv pip install -c "$src/requirements.lock" "$@"
    ;;
  *) echo "install-python.sh: unknown INSTALLER '$INSTALLER' (pip or uv)" >&2; exit 2 ;;
esac
