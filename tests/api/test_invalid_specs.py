"""Every invalid spec is rejected, with a message naming the field, by the models and by the generated CRD."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from tailpilot import crdgen
from tailpilot.api.v1alpha1 import ALL_RULES, RULE_NAME, InferenceService

from .crd_sim import admit
from .invalid_specs import INVALID_SPECS, VALID_SPECS, make_object

OPENAPI = crdgen.openapi_schema()


def render_errors(err: ValidationError) -> str:
    """Render pydantic errors as `path: message` lines, paths in the API server's form."""
    lines = []
    for e in err.errors():
        path = ""
        for part in e["loc"]:
            path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
        lines.append(f"{path}: {e['msg']}")
    return "\n".join(lines)


def pydantic_errors(obj: dict[str, Any]) -> str:
    try:
        InferenceService.model_validate(obj)
    except ValidationError as err:
        return render_errors(err)
    return ""


def test_table_is_large_and_distinct() -> None:
    names = [name for name, _, _ in INVALID_SPECS]
    assert len(names) >= 15
    assert len(set(names)) == len(names)
    specs = [repr(spec) for _, spec, _ in INVALID_SPECS]
    assert len(set(specs)) == len(specs)


@pytest.mark.parametrize(("name", "spec"), VALID_SPECS, ids=[n for n, _ in VALID_SPECS])
def test_valid_specs_are_accepted(name: str, spec: dict[str, Any]) -> None:
    obj = make_object(name, spec)
    assert pydantic_errors(obj) == ""
    assert admit(obj, OPENAPI) == []


@pytest.mark.parametrize(("name", "spec", "expected"), INVALID_SPECS, ids=[n for n, _, _ in INVALID_SPECS])
def test_invalid_spec_rejected_by_models(name: str, spec: dict[str, Any], expected: str) -> None:
    errors = pydantic_errors(make_object(name, spec))
    assert expected in errors, errors


@pytest.mark.parametrize(("name", "spec", "expected"), INVALID_SPECS, ids=[n for n, _, _ in INVALID_SPECS])
def test_invalid_spec_rejected_by_generated_crd(name: str, spec: dict[str, Any], expected: str) -> None:
    errors = admit(make_object(name, spec), OPENAPI)
    assert errors, "the generated CRD accepted it"
    assert any(expected in e for e in errors), errors


def test_every_cross_field_rule_is_exercised() -> None:
    expected = {e for _, _, e in INVALID_SPECS}
    for rule in ALL_RULES:
        if rule is RULE_NAME:
            continue
        assert any(rule.message.endswith(e) or e in rule.message for e in expected), rule.message


def test_long_name_rejected_by_both() -> None:
    obj = make_object("a" * 47, VALID_SPECS[0][1])
    assert RULE_NAME.message in pydantic_errors(obj)
    assert any(RULE_NAME.message in e for e in admit(obj, OPENAPI))
    assert admit(make_object("a" * 46, VALID_SPECS[0][1]), OPENAPI) == []
