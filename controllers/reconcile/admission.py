"""Admission: the spec valid, the admin key's Secret, the engine Jobs' NetworkPolicy, the API server's word.

Every pass first makes sure the service's admin-key Secret exists (`admin_key`): the profile Job's
Triton and the serving pods read their restricted APIs' key from it, so no pod is started before it,
and none at all while a Secret of its name belongs to someone else (`ChildNameTaken`).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from tailpilot.api import constants as c
from tailpilot.api.v1alpha1 import InferenceService, InferenceServiceStatus
from tailpilot.api.validation import check_spec, format_problems
from tailpilot.controllers.core.admin_key import AdminKey, AdminKeyUnavailable, ensure_admin_key
from tailpilot.controllers.core.conditions import ConditionUpdate
from tailpilot.controllers.core.events import EventRecord
from tailpilot.controllers.core.status import decode_status, service_without_status
from tailpilot.controllers.reconcile.children import Children
from tailpilot.controllers.reconcile.deps import PassDeps
from tailpilot.controllers.reconcile.pass_context import ReconcilePass, ReconcileResult
from tailpilot.controllers.reconcile.status_writer import StatusWriter
from tailpilot.manifests.network_policy import engine_jobs_network_policy
from tailpilot.manifests.spec_check import refusal_in_spec_terms, spec_check_deployment

log = logging.getLogger("tailpilot.reconciler")


def api_message(error: ApiException) -> str:
    """The message of the API server's Status in a refusal, or its HTTP reason."""
    try:
        status = json.loads(error.body or "")
    except ValueError:
        status = None
    message = status.get("message") if isinstance(status, dict) else None
    return str(message) if message else f"{error.status} {error.reason}"


class Admission:
    """Whether a pass goes on past its start, and the pass context when it does."""

    def __init__(self, deps: PassDeps, children: Children, writer: StatusWriter) -> None:
        self.deps = deps
        self.children = children
        self.writer = writer
        #: Per service uid: the spec generation whose pod template the API server judged, and its
        #: refusal ("" when accepted).
        self._spec_judged: dict[str, tuple[int, str]] = {}

    def admit(self, body: dict[str, Any]) -> ReconcilePass | ReconcileResult:
        """The pass over the valid service and its admin key (its Secret made sure of), or its end, said."""
        status = decode_status(body.get("status"))
        generation = int(body["metadata"].get("generation", 0))
        try:
            isvc = service_without_status(body)
        except ValidationError as error:
            message = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors())
            return self._invalid(body, status, generation, message)
        problems = check_spec(isvc.spec, name=isvc.name)
        if problems:
            return self._invalid(body, status, generation, format_problems(problems))
        admin = ensure_admin_key(self.deps.kube, isvc)
        if isinstance(admin, AdminKeyUnavailable):
            return self._child_unavailable(body, status, generation, admin.message)
        policy_taken = self.guard_engine_jobs(isvc)
        if policy_taken:
            return self._child_unavailable(body, status, generation, policy_taken)
        refusal = self._judged_by_api_server(isvc, admin)
        if refusal:
            return self._invalid(body, status, generation, refusal)
        return ReconcilePass(body=body, isvc=isvc, admin=admin, status=status, generation=generation)

    def _judged_by_api_server(self, isvc: InferenceService, admin: AdminKey) -> str:
        """Why the API server refuses the serving pods' template this spec makes; "" when it accepts.

        Asked once per spec generation, before any build (`tailpilot.manifests.spec_check`). Only a
        refusal of the object (400, 422) is the spec's; any other failure (a quota, the API server
        busy) is not judged here and is asked again next pass.
        """
        uid, generation = str(isvc.metadata.get("uid", "")), int(isvc.metadata.get("generation", 0))
        judged = self._spec_judged.get(uid)
        if judged is not None and judged[0] == generation:
            return judged[1]
        deployment = spec_check_deployment(
            isvc=isvc, settings=self.deps.settings.manifests, admin_key=admin.ref
        )
        try:
            self.deps.kube.dry_run_create(deployment)
            verdict = ""
        except ApiException as error:
            if error.status not in (400, 422):
                log.warning(
                    "%s/%s: the dry run of its template failed: %s", isvc.namespace, isvc.name, error.status
                )
                return ""
            verdict = refusal_in_spec_terms(api_message(error))
        self._spec_judged[uid] = (generation, verdict)
        return verdict

    def guard_engine_jobs(self, isvc: InferenceService) -> str:
        """Make sure of the NetworkPolicy over the service's Job pods before any Job; "" when done.

        Created (or brought back) before a build or profile Job can start, so none of their pods
        runs without it; deleted when the operator runs without NetworkPolicies. Returns the words of
        a condition when an object this service does not control holds the policy's name: then no
        Job starts, as no pod starts on a key someone else chose.
        """
        policy = engine_jobs_network_policy(isvc=isvc)
        if self.deps.settings.manifests.network_policy is None:
            self.children.prune(isvc, [policy], why="the operator runs without NetworkPolicies")
            return ""
        # A policy brought back is not told (its Events are dropped): the pass's own Events are.
        if self.children.apply(isvc, policy).taken:
            return (
                f"NetworkPolicy {policy['metadata']['name']} exists and is not controlled by this "
                "InferenceService; it is left alone and no build or profile Job starts without the "
                "service's own policy: rename or remove it"
            )
        return ""

    def _invalid(
        self, body: dict[str, Any], status: InferenceServiceStatus, generation: int, message: str
    ) -> ReconcileResult:
        updates = [ConditionUpdate(c.CONDITION_READY, c.STATUS_FALSE, c.REASON_INVALID_SPEC, message)]
        written = self.writer.write(body, status, updates, generation)
        if written:
            self.writer.post(body, [EventRecord("Warning", c.REASON_INVALID_SPEC, message)])
        return ReconcileResult(requeue_after=self.deps.settings.resync_seconds, status_written=written)

    def _child_unavailable(
        self, body: dict[str, Any], status: InferenceServiceStatus, generation: int, message: str
    ) -> ReconcileResult:
        """Stop the pass: without the service's own admin key, or its Jobs' NetworkPolicy, no pod may start.

        A pod would not start, or would start on a key someone else chose, or unguarded. What serves
        keeps serving as it is; the condition says why nothing moves.
        """
        updates = [
            ConditionUpdate(c.CONDITION_ROLLOUT_READY, c.STATUS_FALSE, c.REASON_CHILD_NAME_TAKEN, message),
            ConditionUpdate(c.CONDITION_READY, c.STATUS_FALSE, c.REASON_CHILD_NAME_TAKEN, message),
        ]
        written = self.writer.write(body, status, updates, generation)
        if written:  # once, not every pass while it lasts
            self.writer.post(body, [EventRecord("Warning", c.REASON_CHILD_NAME_TAKEN, message)])
        return ReconcileResult(requeue_after=30.0, status_written=written)
