"""The generated CRD: committed copies do not drift, and the schema is structural, documented and bounded."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import yaml

from tailpilot import crdgen
from tailpilot.api import constants as c

Schema = dict[str, Any]


def _walk(node: Schema, path: str) -> Iterator[tuple[str, Schema]]:
    yield path, node
    for name, sub in node.get("properties", {}).items():
        yield from _walk(sub, f"{path}.{name}")
    if "items" in node:
        yield from _walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _walk(node["additionalProperties"], f"{path}{{}}")


def test_committed_crd_matches_generator() -> None:
    assert crdgen.CRD_PATH.read_text() == crdgen.render_crd_yaml(), "run `tailpilot crds --write`"


def test_chart_crd_matches_generator() -> None:
    assert crdgen.CHART_CRD_PATH.read_text() == crdgen.render_chart_crd_template(), (
        "run `tailpilot crds --write`"
    )


def test_api_docs_match_generator() -> None:
    assert crdgen.API_DOCS_PATH.read_text() == crdgen.render_api_docs(), "run `tailpilot crds --write`"
    text = crdgen.API_DOCS_PATH.read_text()
    for section in (
        "### `spec.model`",
        "### `spec.runtime.gpu`",
        "### `status.conditions[]`",
        "### `status.lastDecision`",
    ):
        assert section in text


def test_check_mode_reports_no_drift() -> None:
    assert crdgen.main(["--check"]) == 0


def test_chart_copy_has_the_same_spec() -> None:
    plain = list(yaml.safe_load_all(crdgen.CRD_PATH.read_text()))
    assert len(plain) == 1
    body = crdgen.CHART_CRD_PATH.read_text()
    spec_text = body[body.index("\nspec:\n") + 1 : body.rindex("{{- end }}")]
    assert yaml.safe_load(spec_text)["spec"] == plain[0]["spec"]


def test_schema_is_structural() -> None:
    root = crdgen.openapi_schema()
    for path, node in _walk(root, ""):
        assert "type" in node or node.get("x-kubernetes-preserve-unknown-fields"), path
        assert not {"$ref", "anyOf", "allOf", "oneOf", "title", "const", "$defs"} & set(node), path
        if "properties" in node:
            assert "additionalProperties" not in node, path
        if node.get("type") == "object" and "properties" not in node and path != ".metadata":
            assert "additionalProperties" in node or node.get("x-kubernetes-preserve-unknown-fields"), path


def test_every_field_is_documented() -> None:
    root = crdgen.openapi_schema()
    for section in ("spec", "status"):
        for path, node in _walk(root["properties"][section], section):
            if path.endswith("[]") or path.endswith("{}"):
                continue  # list items and map values are documented by their parent
            assert node.get("description"), f"{path} has no description (kubectl explain would be empty)"


def test_spec_lists_and_cel_strings_are_bounded() -> None:
    """CEL cost estimation needs maxItems on lists; strings a rule reads need maxLength."""
    spec = crdgen.openapi_schema()["properties"]["spec"]
    for path, node in _walk(spec, "spec"):
        if node.get("type") == "array":
            assert "maxItems" in node, path
    assert spec["properties"]["model"]["properties"]["uri"]["maxLength"] <= 4096


def test_defaults_enums_and_bounds_are_carried() -> None:
    spec = crdgen.openapi_schema()["properties"]["spec"]["properties"]
    assert spec["engine"]["properties"]["backend"]["enum"] == ["tensorrt", "onnxruntime"]
    assert spec["engine"]["default"] == {
        "accuracyTolerance": {"maxRelativeError": 0.1, "minTop1Agreement": 0.9},
        "backend": "onnxruntime",
        "precision": "fp32",
        "profile": True,
        "shapes": [],
    }
    assert spec["rollout"]["default"] == {
        "maxLatencyRegressionPercent": 20.0,
        "strategy": "rolling",
        "canary": {
            "trafficPercent": 20,
            "analysisSeconds": 120,
            "minRequests": 200,
            "maxErrorRatePercent": 1.0,
        },
    }
    assert spec["rollout"]["properties"]["strategy"]["enum"] == ["rolling", "canary"]
    assert spec["batching"]["properties"]["maxBatchSize"]["default"] == 32
    assert spec["batching"]["properties"]["maxBatchSize"]["minimum"] == 1
    assert spec["batching"]["properties"]["preferredBatchSizes"]["x-kubernetes-list-type"] == "set"
    assert (
        spec["runtime"]["properties"]["tolerations"]["items"]["x-kubernetes-preserve-unknown-fields"] is True
    )
    assert spec["runtime"]["properties"]["nodeSelector"]["additionalProperties"] == {"type": "string"}


def test_names_subresources_and_columns() -> None:
    crd = crdgen.crd()
    names = crd["spec"]["names"]
    assert "isvc" not in names["shortNames"] and "tpisvc" in names["shortNames"]
    version = crd["spec"]["versions"][0]
    scale = version["subresources"]["scale"]
    schema = version["schema"]["openAPIV3Schema"]["properties"]
    for json_path in (scale["specReplicasPath"], scale["statusReplicasPath"], scale["labelSelectorPath"]):
        section, field = json_path.strip(".").split(".")
        assert field in schema[section]["properties"], json_path
    columns = [col["name"] for col in version["additionalPrinterColumns"] if "priority" not in col]
    assert columns == ["Ready", "Replicas", "P99", "SLO", "Batch", "Age"]
    assert crd["metadata"]["name"] == c.CRD_NAME


def test_cel_field_paths_exist() -> None:
    root = crdgen.openapi_schema()
    checked = 0
    for path, node in _walk(root, ""):
        for rule in node.get("x-kubernetes-validations", []):
            target = node
            for part in rule.get("fieldPath", "").strip(".").split(".") if "fieldPath" in rule else []:
                assert part in target.get("properties", {}), (
                    f"{path}: fieldPath {rule['fieldPath']} not in schema"
                )
                target = target["properties"][part]
                checked += 1
            assert rule["message"] and rule["rule"]
    assert checked >= 10


def test_print_mode_writes_yaml(capsys: Any) -> None:
    assert crdgen.main([]) == 0
    out = capsys.readouterr().out
    assert yaml.safe_load(out.split("---\n", 1)[1])["kind"] == "CustomResourceDefinition"


def test_every_engine_key_field_carries_the_hex_digest_pattern() -> None:
    # An engine key reaches store paths, labels and the pods' scripts: the API server refuses any
    # status write with one that is not a lower-case hex digest, wherever in the status it sits.
    from tailpilot.api.engine import ENGINE_KEY_PATTERN, OPTIONAL_ENGINE_KEY_PATTERN
    from tests.api.crd_sim import validate

    status = crdgen.openapi_schema()["properties"]["status"]
    keys = {
        path: node.get("pattern")
        for path, node in _walk(status, "status")
        if path.endswith((".engine.key", "EngineKey", ".engineKey"))
    }
    assert len(keys) >= 6, keys  # engine, canary's engine, profiling, the comparison's two, candidates
    assert set(keys.values()) <= {ENGINE_KEY_PATTERN, OPTIONAL_ENGINE_KEY_PATTERN}, keys
    engine = {"key": "0123456789abcdef0123456789abcdef"}
    assert validate({"engine": engine}, status, "status") == []
    for hostile in ("$(reboot)", "../../x", "A" * 32, "0" * 32 + " ", "abc"):
        assert validate({"engine": {"key": hostile}}, status, "status"), hostile
