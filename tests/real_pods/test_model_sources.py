"""Model sources on real pods: the build Job fetches the model where teams keep it, with its credentials.

The CPU example (python variant) with its model in a real S3-compatible store (Versity S3 Gateway on
127.0.0.1, TLS with a private CA): the build Job on local-0 mounts the credentials Secret and the CA
ConfigMap the spec names, fetches the object, builds and publishes the engine, and Triton pods serve
it. Then each way a source breaks is applied in turn: wrong keys, a Secret that does not exist, a
missing object, a checksum that does not match, the private CA left out, a CA ConfigMap that does
not exist. Each is a named failure on EngineReady, and the engine built first keeps serving.

Then an OCI registry (CNCF Distribution, TLS, a registry Secret) and a Hugging Face Hub stand-in
(olah, local git repositories): a service is served from an ORAS artifact pinned by digest, moved
to another model in a Hub repository (a new engine, its commit on status.engine.modelRevision),
and an unknown digest is refused by name while the Hub's engine keeps serving.

Last, a plain https host with its own CA (a TLS server on 127.0.0.1): the CA ConfigMap is what
makes the build Job trust it, so without it the fetch fails by name, and a path the host does not
have is ModelNotFound, while the engine fetched over https keeps serving.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tailpilot.builders import example_model
from tailpilot_e2e.cluster import LocalCluster
from tailpilot_e2e.hf_hub import LocalHub
from tailpilot_e2e.https_host import https_host
from tailpilot_e2e.object_store import LocalObjectStore
from tailpilot_e2e.oci_registry import LocalRegistry
from tailpilot_e2e.operator_harness import OperatorProcess, condition, create_engine_store, custom_object
from tailpilot_e2e.real_pods import cpu_example, infer, ready_endpoints, serve_and_wait_ready
from tailpilot_e2e.wait import eventually

pytestmark = pytest.mark.cluster
NAME = "mlp-s3"
BUCKET, KEY = "models", "mlp/model.onnx"
WRONG_SECRET_KEY = "not-the-store-secret-key"


@pytest.fixture
def store(real_cluster: LocalCluster, tmp_path: Path) -> Iterator[LocalObjectStore]:
    store = LocalObjectStore(real_cluster.binaries.versitygw, tmp_path / "store").start(tls=True)
    try:
        yield store
    finally:
        store.stop()


def _secret(namespace: str, name: str, data: dict[str, str]) -> client.V1Secret:
    return client.V1Secret(metadata=client.V1ObjectMeta(name=name, namespace=namespace), string_data=data)


def test_a_model_in_an_s3_compatible_store_is_built_and_served_and_each_broken_source_is_named(
    real_api: client.ApiClient,
    real_namespace: str,
    operator: OperatorProcess,
    store: LocalObjectStore,
    tmp_path: Path,
) -> None:
    core, ns = client.CoreV1Api(real_api), real_namespace
    create_engine_store(core, ns, host_path=tmp_path / "engines")
    model = example_model.write_example_model(tmp_path / "model.onnx").read_bytes()
    store.create_bucket(BUCKET)
    store.put_object(BUCKET, KEY, model)
    keys = {"AWS_ACCESS_KEY_ID": store.access_key, "AWS_SECRET_ACCESS_KEY": store.secret_key}
    core.create_namespaced_secret(ns, _secret(ns, "store-keys", keys))
    wrong = {**keys, "AWS_SECRET_ACCESS_KEY": WRONG_SECRET_KEY}
    core.create_namespaced_secret(ns, _secret(ns, "wrong-keys", wrong))
    ca = client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="store-ca"), data={"ca.crt": store.ca_file.read_text()}
    )
    core.create_namespaced_config_map(ns, ca)

    service = cpu_example(ns, name=NAME)
    source: dict[str, Any] = {
        "uri": f"s3://{BUCKET}/{KEY}",
        "sha256": hashlib.sha256(model).hexdigest(),
        "s3": {"endpoint": store.endpoint, "addressingStyle": "path"},
        "credentialsSecretRef": {"name": "store-keys"},
        "caBundleConfigMapRef": {"name": "store-ca"},
    }
    service["spec"]["model"] |= source
    serve_and_wait_ready(real_api, service)
    served = custom_object(real_api, ns, NAME)["status"]["engine"]["key"]
    (endpoint, *_) = ready_endpoints(core, ns, NAME)
    assert infer(endpoint).shape[0] == 1

    broken: list[tuple[dict[str, Any], str]] = [
        ({"credentialsSecretRef": {"name": "wrong-keys"}}, "ModelAccessDenied"),
        ({"credentialsSecretRef": {"name": "no-such-secret"}}, "ModelCredentialsMissing"),
        ({"uri": f"s3://{BUCKET}/mlp/missing.onnx", "sha256": None}, "ModelNotFound"),
        ({"sha256": "0" * 64}, "ModelChecksumMismatch"),
        ({"caBundleConfigMapRef": None}, "ModelUnreachable"),  # the store's certificate is not trusted
        ({"caBundleConfigMapRef": {"name": "no-such-ca"}}, "ModelCABundleMissing"),
    ]
    for change, reason in broken:
        # Each from the working source, so that one thing is broken at a time (None deletes a field).
        patch = {"spec": {"model": {**{k: source[k] for k in source}, **change}}}
        client.CustomObjectsApi(real_api).patch_namespaced_custom_object(
            "tailpilot.io", "v1alpha1", ns, "inferenceservices", NAME, patch
        )

        failed = refused_by_name(real_api, ns, NAME, reason, served_key=served)
        # Neither the status nor the Events show a credential.
        status = custom_object(real_api, ns, NAME)["status"]
        events = core.list_namespaced_event(ns, field_selector=f"involvedObject.name={NAME}").items
        shown = json.dumps(status) + " ".join(e.message or "" for e in events)
        assert store.secret_key not in shown and WRONG_SECRET_KEY not in shown
        print(f"{reason}: {failed['message']}")


def refused_by_name(
    api: client.ApiClient, namespace: str, name: str, reason: str, *, served_key: str
) -> dict[str, Any]:
    """Wait for EngineReady False with `reason`; the engine `served_key` still serves. The condition."""

    def named() -> dict[str, Any] | None:
        engine_ready = condition(custom_object(api, namespace, name), "EngineReady") or {}
        return engine_ready if engine_ready.get("reason") == reason else None

    failed = eventually(named, timeout=180, description=f"EngineReady names {reason}")
    assert failed["status"] == "False", failed
    # The engine served before still serves, and answers.
    assert custom_object(api, namespace, name)["status"]["engine"]["key"] == served_key
    assert (condition(custom_object(api, namespace, name), "Ready") or {}).get("status") == "True"
    assert infer(ready_endpoints(client.CoreV1Api(api), namespace, name)[0]).shape[0] == 1
    return failed


def test_models_from_an_oci_registry_and_a_hugging_face_hub_are_built_and_served(
    real_cluster: LocalCluster,
    real_api: client.ApiClient,
    real_namespace: str,
    operator: OperatorProcess,
    tmp_path: Path,
) -> None:
    core, ns, objects = client.CoreV1Api(real_api), real_namespace, client.CustomObjectsApi(real_api)
    create_engine_store(core, ns, host_path=tmp_path / "engines")
    registry = LocalRegistry(real_cluster.binaries.registry, tmp_path / "registry").start()
    hub = LocalHub(tmp_path / "hub").start()
    try:
        oci_model = example_model.write_example_model(tmp_path / "oci.onnx", seed=11).read_bytes()
        hf_model = example_model.write_example_model(tmp_path / "hf.onnx", seed=12).read_bytes()
        digest = registry.push_oras_artifact("models/mlp", "v1", {"model.onnx": oci_model})
        commit = hub.commit("acme/mlp", {"onnx/model.onnx": hf_model})
        pull = client.V1Secret(
            metadata=client.V1ObjectMeta(name="registry-pull"),
            type="kubernetes.io/dockerconfigjson",
            string_data={".dockerconfigjson": json.dumps(registry.docker_config())},
        )
        core.create_namespaced_secret(ns, pull)
        ca = {"ca.crt": registry.ca_file.read_text()}
        core.create_namespaced_config_map(
            ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="registry-ca"), data=ca)
        )

        service = cpu_example(ns, name="mlp-oci")
        oci_source = {
            "uri": registry.uri("models/mlp", digest, tag="v1"),
            "credentialsSecretRef": {"name": "registry-pull"},
            "caBundleConfigMapRef": {"name": "registry-ca"},
        }
        service["spec"]["model"] |= oci_source
        serve_and_wait_ready(real_api, service)
        engine = custom_object(real_api, ns, "mlp-oci")["status"]["engine"]
        assert (engine["modelSha256"], engine["modelRevision"]) == (
            hashlib.sha256(oci_model).hexdigest(),
            digest,
        )
        assert infer(ready_endpoints(core, ns, "mlp-oci")[0]).shape[0] == 1

        # Another model, in a Hub repository at its main branch: a new engine, rolled out.
        hf_source = {"uri": "hf://acme/mlp/onnx/model.onnx", "hf": {"endpoint": hub.endpoint}}
        unset = {"credentialsSecretRef": None, "caBundleConfigMapRef": None}
        patch = {"spec": {"model": {**hf_source, **unset}}}
        objects.patch_namespaced_custom_object(
            "tailpilot.io", "v1alpha1", ns, "inferenceservices", "mlp-oci", patch
        )

        def from_the_hub() -> dict[str, Any] | None:
            status = custom_object(real_api, ns, "mlp-oci")["status"]
            ready = (condition({"status": status}, "Ready") or {}).get("status") == "True"
            served = status.get("engine") or {}
            return served if ready and served.get("modelRevision") == commit else None

        engine = eventually(from_the_hub, timeout=300, description="the Hub's model built and served")
        assert engine["modelSha256"] == hashlib.sha256(hf_model).hexdigest()
        assert infer(ready_endpoints(core, ns, "mlp-oci")[0]).shape[0] == 1

        # An artifact the registry does not hold: named, and the Hub's engine keeps serving.
        unknown = {**oci_source, "uri": registry.uri("models/mlp", "sha256:" + "0" * 64), "hf": None}
        objects.patch_namespaced_custom_object(
            "tailpilot.io", "v1alpha1", ns, "inferenceservices", "mlp-oci", {"spec": {"model": unknown}}
        )
        failed = refused_by_name(real_api, ns, "mlp-oci", "ModelNotFound", served_key=engine["key"])
        print(f"ModelNotFound: {failed['message']}")
    finally:
        registry.stop()
        hub.stop()


def test_a_model_on_an_https_host_with_a_private_ca_is_built_and_served(
    real_api: client.ApiClient, real_namespace: str, operator: OperatorProcess, tmp_path: Path
) -> None:
    core, ns = client.CoreV1Api(real_api), real_namespace
    create_engine_store(core, ns, host_path=tmp_path / "engines")
    (tmp_path / "www").mkdir()
    model = example_model.write_example_model(tmp_path / "www" / "model.onnx", seed=13).read_bytes()
    with https_host(tmp_path / "www", tmp_path / "pki") as host:
        ca = client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name="host-ca"), data={"ca.crt": host.ca_file.read_text()}
        )
        core.create_namespaced_config_map(ns, ca)
        service = cpu_example(ns, name="mlp-https")
        source: dict[str, Any] = {
            "uri": host.url("model.onnx"),
            "sha256": hashlib.sha256(model).hexdigest(),
            "caBundleConfigMapRef": {"name": "host-ca"},
        }
        service["spec"]["model"] |= source
        serve_and_wait_ready(real_api, service)
        served = custom_object(real_api, ns, "mlp-https")["status"]["engine"]
        assert served["modelSha256"] == source["sha256"]
        assert infer(ready_endpoints(core, ns, "mlp-https")[0]).shape[0] == 1

        broken: list[tuple[dict[str, Any], str]] = [
            ({"caBundleConfigMapRef": None}, "ModelUnreachable"),  # the host's certificate is not trusted
            ({"uri": host.url("missing.onnx"), "sha256": "0" * 64}, "ModelNotFound"),
        ]
        for change, reason in broken:
            patch = {"spec": {"model": {**source, **change}}}
            client.CustomObjectsApi(real_api).patch_namespaced_custom_object(
                "tailpilot.io", "v1alpha1", ns, "inferenceservices", "mlp-https", patch
            )
            failed = refused_by_name(real_api, ns, "mlp-https", reason, served_key=served["key"])
            print(f"{reason}: {failed['message']}")
