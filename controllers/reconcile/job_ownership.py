"""Which engine Job and which of its pods the operator may read and delete (pure).

An engine Job (a build or a profile) is found by its name, and its pods carry the `job-name`
label. Neither says who made them: anyone who may create Jobs or pods in the service's namespace
can create a Job of the expected name before the operator does, or a pod with that label beside
the real one, and write any termination message into it. So:

- a Job is the service's only when its controller owner reference is the service (same uid) and
  it carries the operator's managed-by label (`job_not_owned`); a Job of the name that is not is
  never read, never deleted and never adopted, and the service says so;
- a result is read only from a pod whose controller owner reference is that Job, by the uid the
  operator read with it (`pods_of_job`); the Job controller sets it on every pod it creates.

What this cannot stop: whoever can create pods in the namespace can also set an owner reference
to the Job's uid on a pod of their own (owner references are not checked against who created the
pod). That is the service's own tenant and its admins, who can already change the service.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tailpilot.api import constants as c
from tailpilot.api.v1alpha1 import InferenceService
from tailpilot.manifests.meta import controlled_by


def job_uid(job: Mapping[str, Any] | None) -> str:
    """The Job's uid as the API server reported it ("" for none)."""
    return str(((job or {}).get("metadata") or {}).get("uid") or "")


def job_not_owned(job: Mapping[str, Any], isvc: InferenceService) -> str:
    """Why the Job of an engine Job's name is not this service's ("" when it is).

    Both marks are the operator's: the controller owner reference (the service's uid, not its
    name, so a service deleted and created again does not inherit its predecessor's Jobs) and the
    managed-by label, which every child the operator creates carries.
    """
    meta = job.get("metadata") or {}
    name = meta.get("name", "")
    if not controlled_by(job, isvc):
        return f"Job {name} exists and is not controlled by this InferenceService"
    if (meta.get("labels") or {}).get(c.LABEL_MANAGED_BY) != c.MANAGED_BY:
        return f"Job {name} is not labelled {c.LABEL_MANAGED_BY}={c.MANAGED_BY}"
    return ""


def pods_of_job(job: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The pods whose controller owner reference is this Job (by uid); none for a Job without one."""
    uid = job_uid(job)
    if not uid:
        return []
    return [
        dict(pod)
        for pod in pods
        if any(
            ref.get("controller") is True and ref.get("kind") == "Job" and ref.get("uid") == uid
            for ref in (pod.get("metadata") or {}).get("ownerReferences") or []
        )
    ]
