"""TailPilot: serve ONNX models on NVIDIA Triton within a P99 latency SLO at the lowest cost.

Import layers (checked by import-linter, see `.importlinter` and docs/architecture.md), each
pointing only down:

    tailpilot.cli
    tailpilot.bench                                       (the simulator and benchmark tools)
    tailpilot.controllers | tailpilot.builders | tailpilot.crdgen
                                      (the operator; the build Job's code; CRD generation)
    tailpilot.manifests | tailpilot.policy               (pure: desired objects, the SLO policy)
    tailpilot.api                    (typed values: the CRD model and shared contracts)

This folder is `operator/` on disk; the stdlib owns the name `operator`, so
pyproject.toml maps it to the import package `tailpilot`.
"""

__version__ = "0.1.0"
