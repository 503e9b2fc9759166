"""A small stand-in for the API server's CRD handling: structural defaulting, schema checks, CEL rules.

It lets the pure tests run every invalid spec against the *generated* CRD
(not only the pydantic models), so a typo in a CEL expression or a missing
bound fails here, long before the cluster test. CEL is evaluated with
cel-python; values are converted by schema type as the API server does
(`type: number` becomes a CEL double). Messages imitate the API server's
format (`<path>: Invalid value: ...: <message>`).
"""

from __future__ import annotations

import copy
import re
from typing import Any

import celpy

Schema = dict[str, Any]


def apply_defaults(value: Any, schema: Schema) -> Any:
    """Return value with the schema's defaults filled in, recursively (structural defaulting)."""
    value = copy.deepcopy(value)
    if isinstance(value, dict) and "properties" in schema:
        for name, sub in schema["properties"].items():
            if name not in value and "default" in sub:
                value[name] = copy.deepcopy(sub["default"])
            if name in value:
                value[name] = apply_defaults(value[name], sub)
    elif isinstance(value, list) and "items" in schema:
        value = [apply_defaults(v, schema["items"]) for v in value]
    return value


def _to_cel_input(value: Any, schema: Schema) -> Any:
    if schema.get("type") == "number" and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, dict):
        props = schema.get("properties", {})
        return {k: _to_cel_input(v, props.get(k, {})) for k, v in value.items()}
    if isinstance(value, list):
        return [_to_cel_input(v, schema.get("items", {})) for v in value]
    return value


_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
}


def _scalar_errors(value: Any, schema: Schema, path: str) -> list[str]:
    errors = []
    if "enum" in schema and value not in schema["enum"]:
        supported = ", ".join(f'"{v}"' for v in schema["enum"])
        errors.append(f'{path}: Unsupported value: "{value}": supported values: {supported}')
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and (
            value < schema["minimum"] or (schema.get("exclusiveMinimum") and value == schema["minimum"])
        ):
            errors.append(
                f"{path}: Invalid value: {value}: {path} in body should be greater than {schema['minimum']}"
            )
        if "maximum" in schema and value > schema["maximum"]:
            errors.append(
                f"{path}: Invalid value: {value}: {path} in body should be less than {schema['maximum']}"
            )
    if isinstance(value, str):
        if "pattern" in schema and not re.search(schema["pattern"], value):
            errors.append(
                f"{path}: Invalid value: \"{value}\": {path} in body should match '{schema['pattern']}'"
            )
        if len(value) > schema.get("maxLength", len(value)) or len(value) < schema.get("minLength", 0):
            errors.append(f'{path}: Invalid value: "{value}": {path} has an invalid length')
    return errors


def _list_errors(value: list[Any], schema: Schema, path: str) -> list[str]:
    errors = []
    if len(value) > schema.get("maxItems", len(value)) or len(value) < schema.get("minItems", 0):
        errors.append(f"{path}: Invalid value: {len(value)}: {path} has an invalid number of items")
    keys = schema.get("x-kubernetes-list-map-keys")
    seen: list[Any] = []
    for i, item in enumerate(value):
        ident = tuple(item.get(k) for k in keys) if keys and isinstance(item, dict) else item
        if schema.get("x-kubernetes-list-type") in {"set", "map"} and ident in seen:
            errors.append(f"{path}[{i}]: Duplicate value: {item}")
        seen.append(ident)
        errors += validate(item, schema.get("items", {}), f"{path}[{i}]")
    return errors


class _Optional:
    """CEL's optional as a rule with `optionalOldSelf` sees `oldSelf`: empty on create."""

    def __init__(self, value: Any) -> None:
        self.value = value


def _has_value(optional: _Optional) -> celpy.celtypes.BoolType:
    return celpy.celtypes.BoolType(optional.value is not None)


def _cel_errors(value: Any, schema: Schema, path: str, old: Any = None) -> list[str]:
    """The CEL rules' errors; `old` is the object before an update (None: a create)."""
    errors = []
    env = celpy.Environment()
    activation: dict[str, Any] = {"self": celpy.json_to_cel(_to_cel_input(value, schema))}
    old_cel = None if old is None else celpy.json_to_cel(_to_cel_input(old, schema))
    for rule in schema.get("x-kubernetes-validations", []):
        if rule.get("optionalOldSelf"):
            activation["oldSelf"] = _Optional(old_cel)
        elif "oldSelf" in rule["rule"]:
            if old_cel is None:
                continue  # a transition rule: the API server runs it on updates only
            activation["oldSelf"] = old_cel
        program = env.program(env.compile(rule["rule"]), functions={"hasValue": _has_value})
        result = program.evaluate(activation)
        if not isinstance(result, celpy.celtypes.BoolType):
            raise AssertionError(f"CEL rule {rule['rule']!r} at {path} did not give a bool: {result!r}")
        if not bool(result):
            errors.append(f'{path}{rule.get("fieldPath", "")}: Invalid value: "object": {rule["message"]}')
    return errors


def validate(value: Any, schema: Schema, path: str) -> list[str]:
    """Validate an already defaulted value against a structural schema node; return API-server-like errors."""
    if schema.get("x-kubernetes-preserve-unknown-fields") and "properties" not in schema:
        return []
    expected = _TYPES[schema["type"]]
    if not isinstance(value, expected) or (schema["type"] != "boolean" and isinstance(value, bool)):
        return [f"{path}: Invalid value: {value!r}: {path} in body must be of type {schema['type']}"]
    errors = _scalar_errors(value, schema, path)
    if isinstance(value, dict):
        props = schema.get("properties")
        errors += [
            f"{path}.{name}: Required value" for name in schema.get("required", []) if name not in value
        ]
        for name, sub in value.items():
            if props is not None and name in props:
                errors += validate(sub, props[name], f"{path}.{name}")
            elif props is not None:
                errors.append(f'{path}: unknown field "{path}.{name}"')
            elif "additionalProperties" in schema:
                errors += validate(sub, schema["additionalProperties"], f"{path}.{name}")
    elif isinstance(value, list):
        errors += _list_errors(value, schema, path)
    if not errors:
        errors += _cel_errors(value, schema, path)
    return errors


def admit(obj: dict[str, Any], openapi: Schema, *, old: dict[str, Any] | None = None) -> list[str]:
    """Default then validate a whole object (spec and root rules), as `kubectl apply` would see it.

    `old`: the stored object, for an update (the root rules then see it as `oldSelf`); None: a create.
    """
    defaulted = apply_defaults(obj, openapi)
    errors = validate(defaulted["spec"], openapi["properties"]["spec"], "spec")
    if not errors:
        errors += _cel_errors(defaulted, openapi, "", None if old is None else apply_defaults(old, openapi))
    return errors
