# syntax=docker/dockerfile:1
# The TailPilot operator image: `tailpilot operator` (kopf) on a slim Python 3.11; the chart's
# activator Deployment runs it too, as `python -P -m tailpilot.activator` (the venv's python, on PATH).
#
#   docker build -f docker/operator.Dockerfile -t ghcr.io/tailpilot/tailpilot-operator:0.1.0 .
#
# (`make images` runs this; no registry hosts the image: README.md, "On a real cluster".)
# Two stages: the venv is built in the first, the runtime stage has only the venv.
# docker/install-python.sh installs the project with every version from requirements.lock: its own
# dependencies only (tritonclient's grpc/http clients render Triton's config.pbtxt and change
# batching live); the heavy Triton/pytriton extras are not installed.
# tests/images/test_image_installs.py runs the same script and imports what `tailpilot operator` needs.

ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
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
RUN sh docker/install-python.sh operator /opt/venv

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="tailpilot-operator" \
      org.opencontainers.image.source="https://github.com/tailpilot/tailpilot" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# A fixed non-root UID (the chart's podSecurityContext runs as 65532) and a read-only root
# filesystem: nothing is written outside /tmp (an emptyDir in the chart).
USER 65532:65532
EXPOSE 8080 8081 9090
ENTRYPOINT ["tailpilot"]
CMD ["operator"]
