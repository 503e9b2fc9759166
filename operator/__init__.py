"""TailPilot: serve ONNX models on NVIDIA Triton within a P99 latency SLO at the lowest cost.

Import layers (checked by import-linter, see `.importlinter`), each pointing only down:

    tailpilot.cli
    tailpilot.controllers            (talks to the cluster, Prometheus, Triton)
    tailpilot.builders | tailpilot.manifests | tailpilot.policy   (pure or job-side code)
    tailpilot.api                    (typed values: the CRD model and shared contracts)

This folder is `operator/` on disk; the stdlib owns the name `operator`, so
pyproject.toml maps it to the import package `tailpilot`.
"""

__version__ = "0.1.0"
