"""The `tailpilot` console script: one entry point, subcommands loaded lazily.

Installed twice: as `tailpilot`, and as `kubectl-tailpilot`, which kubectl runs as the plugin
`kubectl tailpilot ...` (e.g. `kubectl tailpilot status NAME -n NAMESPACE`).

Lazy imports keep `tailpilot operator` free of the builder's heavy
dependencies (onnx, onnxruntime) and vice versa.
"""

from __future__ import annotations

import importlib
import sys

#: subcommand -> (module, function, one-line help); each function takes argv and returns an exit code.
SUBCOMMANDS: dict[str, tuple[str, str, str]] = {
    "operator": (
        "tailpilot.controllers.process.main",
        "main",
        "run the operator against the current kubeconfig",
    ),
    "build": (
        "tailpilot.builders.cli",
        "build_main",
        "build (or find cached) an engine from a build request",
    ),
    "profile": ("tailpilot.builders.cli", "profile_main", "profile a built engine in a real Triton"),
    "make-example-model": ("tailpilot.builders.cli", "example_model_main", "write the example ONNX model"),
    "crds": ("tailpilot.crdgen", "main", "print or write the CRD YAML generated from the API models"),
    "status": (
        "tailpilot.tools.status_view",
        "status_main",
        "show an InferenceService's state: P99, time breakdown, engine, choices, decisions",
    ),
    "report": (
        "tailpilot.tools.report",
        "report_main",
        "write a Markdown and PNG report of an InferenceService over a time range, from Prometheus",
    ),
}


def _usage() -> str:
    lines = ["usage: tailpilot <command> [args...]", "", "commands:"]
    lines += [f"  {name:<20} {help_}" for name, (_, _, help_) in SUBCOMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Dispatch to a subcommand."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in {"-h", "--help"}:
        print(_usage())
        return 0 if args else 2
    name, rest = args[0], args[1:]
    if name not in SUBCOMMANDS:
        print(f"tailpilot: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module_name, func_name, _ = SUBCOMMANDS[name]
    func = getattr(importlib.import_module(module_name), func_name)
    return int(func(rest))


if __name__ == "__main__":
    sys.exit(main())
