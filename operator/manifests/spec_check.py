"""The serving pods' template as the API server will judge it, before any build (pure part).

`check_spec` (`tailpilot.api.validation`) judges what it can read from the spec: amounts, requests
against limits, the affinity's top-level fields. The user's Kubernetes blocks (`spec.runtime`'s
resources, affinity, tolerations, node selector) are the core API's own types, which the CRD keeps
whole: only the API server knows all of their rules (a term's shape, an operator's values, a
toleration's effect). Left to the Deployment, a block it refuses failed after the build, on every
pass. So, once per spec generation and before any build, the controller has the API server dry-run
a create of the Deployment the service would get (`spec_check_deployment`, with a placeholder
engine and a generated name, so nothing of the service's is touched), and a refusal becomes
`Ready=False InvalidSpec` in the service's own terms (`refusal_in_spec_terms`).
"""

from __future__ import annotations

from typing import Any, Final

from tailpilot.api.v1alpha1 import InferenceService
from tailpilot.manifests.deployment import triton_deployment
from tailpilot.manifests.settings import ManifestSettings
from tailpilot.manifests.triton_access import AdminKeyRef

#: The engine the judged Deployment names: any key of the valid shape (nothing reads it).
PLACEHOLDER_ENGINE_KEY: Final = "0" * 40
#: The judged Deployment's name prefix (the API server appends a random suffix).
SPEC_CHECK_SUFFIX: Final = "-spec-check-"
#: A refusal quoted on a condition is cut to this many characters.
MAX_REFUSAL_CHARS: Final = 1024
#: Where the Deployment's pod template holds each of the service's blocks.
_TEMPLATE_FIELDS: Final = (
    ("spec.template.spec.containers[0].resources", "spec.runtime.resources"),
    ("spec.template.spec.affinity", "spec.runtime.affinity"),
    ("spec.template.spec.tolerations", "spec.runtime.tolerations"),
    ("spec.template.spec.nodeSelector", "spec.runtime.nodeSelector"),
)


def spec_check_deployment(
    *, isvc: InferenceService, settings: ManifestSettings, admin_key: AdminKeyRef
) -> dict[str, Any]:
    """The Deployment the service would get, to be dry-run: a placeholder engine, a generated name."""
    deployment = triton_deployment(
        isvc=isvc,
        engine_key=PLACEHOLDER_ENGINE_KEY,
        rollout_hash="spec-check",
        replicas=1,
        settings=settings,
        admin_key=admin_key,
    )
    meta = deployment["metadata"]
    meta["generateName"] = meta.pop("name") + SPEC_CHECK_SUFFIX
    return deployment


def refusal_in_spec_terms(message: str) -> str:
    """The API server's refusal of the judged Deployment, with its fields named as the service's.

    `Deployment.apps "a-spec-check-x2f" is invalid: spec.template.spec.affinity.nodeAffinity...`
    becomes `the API server refuses the serving pods' template: spec.runtime.affinity.nodeAffinity...`.
    """
    _, said, causes = message.partition(" is invalid: ")
    text = causes if said else message
    for template_path, spec_path in _TEMPLATE_FIELDS:
        text = text.replace(template_path, spec_path)
    text = f"the API server refuses the serving pods' template: {text}"
    return text if len(text) <= MAX_REFUSAL_CHARS else text[: MAX_REFUSAL_CHARS - 3] + "..."
