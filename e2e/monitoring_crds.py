"""Files of the upstream prometheus-operator Go module for tests: its CRDs and its RBAC examples.

They are taken from the prometheus-operator Go module at the pinned version
(`example/prometheus-operator-crd/`, `example/rbac/`), fetched once through the Go
module proxy and cached with the other build outputs.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from tailpilot_e2e.config import cache_dir, read_versions

MODULE = "github.com/prometheus-operator/prometheus-operator"
_CRD_DIR = "example/prometheus-operator-crd"
#: The two kinds the operator generates (what `--monitoring-label` labels).
CRD_FILES = ("monitoring.coreos.com_servicemonitors.yaml", "monitoring.coreos.com_prometheusrules.yaml")
#: Every kind prometheus-operator serves: what kube-prometheus-stack installs before the operator.
ALL_CRD_FILES = (
    "monitoring.coreos.com_alertmanagerconfigs.yaml",
    "monitoring.coreos.com_alertmanagers.yaml",
    "monitoring.coreos.com_podmonitors.yaml",
    "monitoring.coreos.com_probes.yaml",
    "monitoring.coreos.com_prometheusagents.yaml",
    "monitoring.coreos.com_prometheuses.yaml",
    "monitoring.coreos.com_prometheusrules.yaml",
    "monitoring.coreos.com_scrapeconfigs.yaml",
    "monitoring.coreos.com_servicemonitors.yaml",
    "monitoring.coreos.com_thanosrulers.yaml",
)


def module_files(paths: Sequence[str]) -> list[Path]:
    """Cached copies of these files of the module (paths relative to its root), fetching it the first time."""
    version = read_versions()["PROMETHEUS_OPERATOR_VERSION"]
    target = cache_dir() / "crds" / f"prometheus-operator-{version}"
    wanted = [target / path for path in paths]
    if all(p.exists() for p in wanted):
        return wanted
    out = subprocess.run(
        ["go", "mod", "download", "-json", f"{MODULE}@{version}"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd="/",
    )
    info = json.loads(out.stdout or "{}")
    if out.returncode != 0 or "Dir" not in info:
        raise RuntimeError(f"could not fetch {MODULE}@{version}: {info.get('Error') or out.stderr.strip()}")
    for path, copy in zip(paths, wanted, strict=True):
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(Path(info["Dir"]) / path, copy)
    return wanted


def crd_files(names: Sequence[str] = CRD_FILES) -> list[Path]:
    """The cached CRD YAML files (by default the two kinds the operator generates)."""
    return module_files([f"{_CRD_DIR}/{name}" for name in names])
