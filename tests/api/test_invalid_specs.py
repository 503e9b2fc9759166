"""Every invalid spec is rejected, with a message naming the field, by the models and by the generated CRD."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from tailpilot import crdgen
from tailpilot.api import constants as c
from tailpilot.api.v1alpha1 import ALL_RULES, RULE_NAME, RULE_NAME_SUFFIX, InferenceService

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
        if rule in (RULE_NAME, RULE_NAME_SUFFIX):  # names: the tests below
            continue
        assert any(rule.message.endswith(e) or e in rule.message for e in expected), rule.message


def test_long_name_rejected_by_both() -> None:
    obj = make_object("a" * 47, VALID_SPECS[0][1])
    assert RULE_NAME.message in pydantic_errors(obj)
    assert any(RULE_NAME.message in e for e in admit(obj, OPENAPI))
    assert admit(make_object("a" * 46, VALID_SPECS[0][1]), OPENAPI) == []


@pytest.mark.parametrize("suffix", c.RESERVED_NAME_SUFFIXES)
def test_a_name_ending_with_a_child_suffix_is_refused_at_creation(suffix: str) -> None:
    obj = make_object(f"a{suffix}", VALID_SPECS[0][1])
    errors = admit(obj, OPENAPI)
    assert any(RULE_NAME_SUFFIX.message in e for e in errors), errors
    assert f"'{suffix}'" in RULE_NAME_SUFFIX.message
    # The suffix inside the name, or the bare word, is no child's name.
    for name in (f"a{suffix}-x", suffix.lstrip("-"), f"a{suffix.replace('-', '')}"):
        assert admit(make_object(name, VALID_SPECS[0][1]), OPENAPI) == [], name


def test_an_object_created_before_the_suffix_rule_can_still_be_updated() -> None:
    # Names never change, so an update (a spec edit, the operator's status writes) of an object the
    # API server admitted before the rule existed passes; only its creation would have been refused.
    old = make_object("a-metrics", VALID_SPECS[0][1])
    new = make_object("a-metrics", {**VALID_SPECS[0][1], "slo": {"p99LatencyMs": 80}})
    assert admit(new, OPENAPI, old=old) == []
    # The models do not refuse it either: the operator keeps serving what was admitted.
    assert pydantic_errors(new) == ""
