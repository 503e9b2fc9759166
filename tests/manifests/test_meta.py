from __future__ import annotations

import pytest

from tailpilot.api import constants as c
from tailpilot.builders.store import REPOSITORY, EngineStore
from tailpilot.manifests.meta import (
    controlled_by,
    object_meta,
    owner_reference,
    selector_string,
)

from .fixtures import make_isvc


def test_owner_reference_is_controller() -> None:
    ref = owner_reference(make_isvc("a").obj())
    assert ref == {
        "apiVersion": "tailpilot.io/v1alpha1",
        "kind": "InferenceService",
        "name": "a",
        "uid": "uid-a",
        "controller": True,
        "blockOwnerDeletion": True,
    }


def test_controlled_by_matches_the_controller_reference_by_uid_not_name() -> None:
    isvc = make_isvc("a").obj()
    ours = {"metadata": {"ownerReferences": [owner_reference(isvc)]}}
    assert controlled_by(ours, isvc)
    # A same-named object left by an earlier InferenceService "a" (another uid) is not ours to delete.
    earlier = {"metadata": {"ownerReferences": [{**owner_reference(isvc), "uid": "uid-old"}]}}
    assert not controlled_by(earlier, isvc)
    not_controller = {"metadata": {"ownerReferences": [{**owner_reference(isvc), "controller": False}]}}
    assert not controlled_by(not_controller, isvc)
    assert not controlled_by({"metadata": {"name": "hand-made"}}, isvc)


def test_owner_reference_needs_uid() -> None:
    isvc = make_isvc("a").obj()
    no_uid = isvc.model_copy(update={"metadata": {"name": "a"}})
    with pytest.raises(ValueError, match="uid"):
        owner_reference(no_uid)


def test_object_meta_labels() -> None:
    meta = object_meta(isvc=make_isvc("a", "ns1").obj(), name="a-x", component="thing")
    assert meta["namespace"] == "ns1"
    assert meta["labels"][c.LABEL_ISVC] == "a"
    assert meta["labels"][c.LABEL_MANAGED_BY] == c.MANAGED_BY
    assert meta["labels"][c.LABEL_COMPONENT] == "thing"
    assert selector_string("a") == (
        "app.kubernetes.io/component=inference-server,app.kubernetes.io/name=triton,tailpilot.io/inferenceservice=a"
    )


def test_store_layout_matches_builder(tmp_path) -> None:
    store = EngineStore(tmp_path)
    assert store.engine_dir("k") == tmp_path / c.ENGINE_STORE_ENGINES_DIR / "k"
    assert REPOSITORY == c.ENGINE_STORE_REPOSITORY_DIR


def test_settings_from_env_rejects_bad_input() -> None:
    from tailpilot.manifests.settings import settings_from_env

    with pytest.raises(ValueError, match="TAILPILOT_BUILDER_IMAGE"):
        settings_from_env({})
    with pytest.raises(ValueError, match="JSON object"):
        settings_from_env({"TAILPILOT_BUILDER_IMAGE": "b", "TAILPILOT_MONITORING_LABELS": "[1]"})
    settings = settings_from_env({"TAILPILOT_BUILDER_IMAGE": "b", "TAILPILOT_TRITON_IMAGE": ""})
    assert settings.triton_image == c.DEFAULT_TRITON_IMAGE and settings.monitoring_labels == {}


def test_build_pod_limits_and_the_stores_gc_come_from_the_environment() -> None:
    from tailpilot.manifests.settings import ManifestSettings, settings_from_env

    defaults = settings_from_env({"TAILPILOT_BUILDER_IMAGE": "b", "TAILPILOT_STORE_BUDGET": ""})
    assert defaults == ManifestSettings(builder_image="b")
    assert defaults.store_budget_bytes is None
    chosen = settings_from_env(
        {
            "TAILPILOT_BUILDER_IMAGE": "b",
            "TAILPILOT_BUILD_MEMORY_REQUEST": "2Gi",
            "TAILPILOT_BUILD_MEMORY_LIMIT": "16Gi",
            "TAILPILOT_BUILD_TMP_SIZE": "20Gi",
            "TAILPILOT_STORE_RETENTION_HOURS": "48",
            "TAILPILOT_STORE_BUDGET": "500Gi",
        }
    )
    assert (chosen.build_memory_request, chosen.build_memory_limit, chosen.build_tmp_size) == (
        "2Gi",
        "16Gi",
        "20Gi",
    )
    assert chosen.store_retention_hours == 48.0
    assert chosen.store_budget_bytes == 500 * 1024**3
    bad = {
        "TAILPILOT_BUILD_TMP_SIZE": "lots",
        "TAILPILOT_BUILD_MEMORY_LIMIT": "0",
        "TAILPILOT_STORE_RETENTION_HOURS": "-1",
        "TAILPILOT_STORE_BUDGET": "1e",
    }
    for name, value in bad.items():
        with pytest.raises(ValueError, match=name):
            settings_from_env({"TAILPILOT_BUILDER_IMAGE": "b", name: value})
    with pytest.raises(ValueError, match="above TAILPILOT_BUILD_MEMORY_LIMIT"):
        settings_from_env({"TAILPILOT_BUILDER_IMAGE": "b", "TAILPILOT_BUILD_MEMORY_REQUEST": "9Gi"})
