# syntax=docker/dockerfile:1
# The engine builder image: `tailpilot build` / `tailpilot profile` in build Jobs.
#
#   docker build -f docker/builder.Dockerfile -t ghcr.io/tailpilot/tailpilot-builder:0.1.0 .
#
# Base: NVIDIA's Triton 24.10 image (Triton 2.51 with the onnxruntime, tensorrt and python
# backends, TensorRT 10.5 runtime, CUDA 12.6), so an engine is profiled in the same Triton that
# serves it. trtexec comes from the matching TensorRT 24.10 image. The image's Python is 3.10;
# TailPilot needs 3.11, which uv installs as a standalone interpreter into /opt/python.
# (`make images` runs the build; no registry hosts the image: README.md, "On a real cluster".)
# docker/install-python.sh (INSTALLER=uv) installs the project and tritonclient[all] with every
# version from requirements.lock; tests/images/test_image_installs.py runs the same script (with
# pip and this machine's Python 3.11 where uv is absent) and imports what `tailpilot build` needs.

ARG TRITON_IMAGE=nvcr.io/nvidia/tritonserver:24.10-py3
ARG TENSORRT_IMAGE=nvcr.io/nvidia/tensorrt:24.10-py3
ARG UV_IMAGE=ghcr.io/astral-sh/uv:0.5.11

FROM ${UV_IMAGE} AS uv
FROM ${TENSORRT_IMAGE} AS tensorrt

FROM ${TRITON_IMAGE}
COPY --from=uv /uv /usr/local/bin/uv
COPY --from=tensorrt /usr/src/tensorrt/bin/trtexec /usr/local/bin/trtexec
ENV UV_PYTHON_INSTALL_DIR=/opt/python UV_NO_CACHE=1 UV_LINK_MODE=copy
WORKDIR /src
COPY pyproject.toml README.md requirements.lock ./
COPY docker/install-python.sh docker/
COPY operator/ operator/
COPY controllers/ controllers/
COPY tools/ tools/
COPY builders/ builders/
COPY activator/ activator/
COPY bench/ bench/
COPY e2e/__init__.py e2e/
RUN uv python install 3.11 \
 && INSTALLER=uv PYTHON=3.11 sh docker/install-python.sh builder /opt/venv \
 && rm -rf /src
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
WORKDIR /
# The UID the operator runs its pods as (ManifestSettings.run_as_user, above 10000 so that it is no
# host account); the Job's securityContext sets it too, with a read-only root filesystem, writing
# only to /tmp and the engine store mount.
USER 10001:10001
ENTRYPOINT ["tailpilot"]
CMD ["build", "--help"]
