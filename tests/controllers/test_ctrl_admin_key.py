"""The admin-key Secret: created once with a random key, never taken from another owner, remade if deleted."""

from __future__ import annotations

import base64
from typing import Any

from tailpilot.controllers.core.admin_key import (
    AdminKey,
    AdminKeyUnavailable,
    ensure_admin_key,
    generate_key,
    read_admin_key,
)
from tailpilot.controllers.core.kubeapi import Resource
from tailpilot.manifests.triton_access import SECRET_KEY
from tests.manifests.fixtures import make_isvc


class SecretsKube:
    """Secrets by name; `racer`: a Secret another owner creates between our GET and our POST (409)."""

    def __init__(self, racer: dict[str, Any] | None = None) -> None:
        self.live: dict[str, dict[str, Any]] = {}
        self.racer, self.created, self.uids = racer, 0, 0

    def get(self, resource: Resource, namespace: str, name: str) -> dict[str, Any] | None:
        assert resource.kind == "Secret"
        return self.live.get(name)

    def create(self, body: dict[str, Any]) -> dict[str, Any] | None:
        name = body["metadata"]["name"]
        if self.racer is not None:
            self.live[name], self.racer = self.racer, None
            return None
        if name in self.live:
            return None
        self.created += 1
        self.uids += 1
        self.live[name] = {**body, "metadata": {**body["metadata"], "uid": f"uid-{self.uids}"}}
        return self.live[name]


def _foreign(name: str, key: str = "chosen-by-someone-else") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "ownerReferences": [{"controller": True, "uid": "another-service"}]},
        "data": {SECRET_KEY: base64.b64encode(key.encode()).decode()},
    }


def test_the_secret_is_created_once_with_a_random_key_and_read_back_after() -> None:
    isvc = make_isvc("a").obj()
    kube = SecretsKube()
    first = ensure_admin_key(kube, isvc)
    assert isinstance(first, AdminKey)
    assert first.ref.secret_name == "a-triton-admin" and first.ref.secret_uid == "uid-1"
    assert len(first.value) >= 40  # 32 random bytes, base64url
    secret = kube.live["a-triton-admin"]
    assert secret["immutable"] is True
    assert secret["metadata"]["ownerReferences"][0]["uid"] == isvc.metadata["uid"]
    assert base64.b64decode(secret["data"][SECRET_KEY]).decode() == first.value
    again = ensure_admin_key(kube, isvc, generate=lambda: "never-used")
    assert again == first and kube.created == 1  # an existing key is never replaced
    assert read_admin_key(kube, isvc) == first.value


def test_keys_differ_between_services() -> None:
    assert len({generate_key() for _ in range(50)}) == 50


def test_a_deleted_secret_is_recreated_with_a_new_key_and_uid() -> None:
    isvc = make_isvc("a").obj()
    kube = SecretsKube()
    first = ensure_admin_key(kube, isvc)
    del kube.live["a-triton-admin"]
    assert read_admin_key(kube, isvc) is None
    second = ensure_admin_key(kube, isvc)
    assert isinstance(first, AdminKey) and isinstance(second, AdminKey)
    assert second.value != first.value
    assert second.ref.secret_uid != first.ref.secret_uid  # what rolls the pods onto the new key


def test_a_foreign_secret_is_never_used_or_overwritten() -> None:
    isvc = make_isvc("a").obj()
    kube = SecretsKube()
    kube.live["a-triton-admin"] = _foreign("a-triton-admin")
    outcome = ensure_admin_key(kube, isvc)
    assert isinstance(outcome, AdminKeyUnavailable)
    assert "Secret a-triton-admin exists and is not controlled by this InferenceService" in outcome.message
    assert kube.created == 0 and kube.live["a-triton-admin"] == _foreign("a-triton-admin")
    assert read_admin_key(kube, isvc) is None  # its key is never sent either


def test_a_foreign_secret_created_between_the_read_and_the_create_is_not_taken() -> None:
    isvc = make_isvc("a").obj()
    kube = SecretsKube(racer=_foreign("a-triton-admin"))
    outcome = ensure_admin_key(kube, isvc)
    assert isinstance(outcome, AdminKeyUnavailable)
    assert kube.live["a-triton-admin"] == _foreign("a-triton-admin")


def test_an_owned_secret_without_a_key_is_reported_not_used() -> None:
    isvc = make_isvc("a").obj()
    kube = SecretsKube()
    owned = {
        "metadata": {
            "name": "a-triton-admin",
            "uid": "u",
            "ownerReferences": [{"controller": True, "uid": "uid-a"}],
        }
    }
    kube.live["a-triton-admin"] = owned
    outcome = ensure_admin_key(kube, isvc)
    assert isinstance(outcome, AdminKeyUnavailable) and "holds no admin key" in outcome.message
