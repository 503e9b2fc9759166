"""The upstream prometheus-operator CRDs (ServiceMonitor, PrometheusRule) for tests.

They are taken from the prometheus-operator Go module at the pinned version
(`example/prometheus-operator-crd/`), fetched once through the Go module proxy
and cached with the other build outputs.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from tailpilot_e2e.config import cache_dir, read_versions

MODULE = "github.com/prometheus-operator/prometheus-operator"
CRD_FILES = ("monitoring.coreos.com_servicemonitors.yaml", "monitoring.coreos.com_prometheusrules.yaml")


def crd_files() -> list[Path]:
    """Paths of the cached CRD YAML files, fetching the module the first time."""
    version = read_versions()["PROMETHEUS_OPERATOR_VERSION"]
    target = cache_dir() / "crds" / f"prometheus-operator-{version}"
    wanted = [target / name for name in CRD_FILES]
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
    target.mkdir(parents=True, exist_ok=True)
    for name in CRD_FILES:
        shutil.copyfile(Path(info["Dir"]) / "example" / "prometheus-operator-crd" / name, target / name)
    return wanted
