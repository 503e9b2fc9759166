"""What each consumer of the cluster client calls of it, as Protocols (`kubeapi.Kube` satisfies all).

A consumer's parameter names the calls it makes rather than `Kube` itself: a test hands it a double
with just those calls, checked like the real client, and a reader sees at the signature which
requests the consumer can send. Each call is written as narrowly as its consumers make it (the
namespace always given where they always give one, positional where they pass it by position, the
answer typed `object` where nobody reads it), so a double need not be wider than what it stands in
for.

One call per Protocol, combined per consumer below. Here rather than next to `Kube`: the consumers
reach from the leaves (`events`, `admin_key`) to the reconciler, so these sit in the lowest layer
with the client, and the client's module keeps only the client.
"""

from __future__ import annotations

from typing import Any, Protocol

from tailpilot.controllers.core.kubeapi import Resource

# ---- one call each ----------------------------------------------------------------------------------


class GetsObjects(Protocol):
    """Reads one object by name."""

    def get(self, resource: Resource, namespace: str, name: str, /) -> dict[str, Any] | None:
        """The object, or None when it does not exist."""
        ...


class ListsSelected(Protocol):
    """Lists the objects of one namespace that a label selector selects."""

    def list(self, resource: Resource, namespace: str, /, *, label_selector: str) -> list[dict[str, Any]]:
        """The objects the selector selects."""
        ...


class ListsObjects(Protocol):
    """Lists objects in one namespace or in all (None), by label or field selector or none."""

    def list(
        self,
        resource: Resource,
        namespace: str | None,
        /,
        *,
        label_selector: str = "",
        field_selector: str = "",
    ) -> list[dict[str, Any]]:
        """The objects the selectors select."""
        ...


class CreatesObjects(Protocol):
    """Creates an object unless one of its name exists."""

    def create(self, body: dict[str, Any], /) -> dict[str, Any] | None:
        """The created object; None when one of that name already existed."""
        ...


class DryRunCreates(Protocol):
    """Has the API server judge a create without persisting it."""

    def dry_run_create(self, body: dict[str, Any], /) -> dict[str, Any]:
        """The object as it would be created (raises what the API server refused)."""
        ...


class AppliesObjects(Protocol):
    """Server-side applies an object."""

    def apply(self, body: dict[str, Any], /) -> dict[str, Any]:
        """The object as applied."""
        ...


class DeletesObjects(Protocol):
    """Deletes an object, only the one of the uid read when a uid is given."""

    def delete(self, resource: Resource, namespace: str, name: str, /, *, uid: str | None) -> bool:
        """Whether it was deleted (False: already gone, or the name now holds another object)."""
        ...


class PatchesStatus(Protocol):
    """Merge-patches an InferenceService's status."""

    def patch_status(self, body: dict[str, Any], patch: dict[str, Any], /) -> object:
        """Write `patch` onto the status of `body` (the answer is not read)."""
        ...


class MergePatches(Protocol):
    """Merge-patches an object."""

    def merge_patch(self, resource: Resource, namespace: str, name: str, patch: dict[str, Any], /) -> object:
        """Write `patch` onto the object (the answer is not read)."""
        ...


class PostsEvents(Protocol):
    """Posts a core/v1 Event about an object."""

    def post_event(
        self, involved: dict[str, Any], /, *, type_: str, reason: str, message: str, now: str
    ) -> None:
        """Post one Event; `now` is RFC 3339 text."""
        ...


class HasResources(Protocol):
    """Asks whether the cluster serves a resource."""

    def has_resource(self, group: str, version: str, plural: str, /) -> bool:
        """Whether `group/version` serves `plural`."""
        ...


class ReadsLeases(Protocol):
    """Reads a Lease in one attempt bounded in time."""

    def read_lease(self, namespace: str, name: str, *, timeout_s: float) -> dict[str, Any] | None:
        """The Lease, or None when there is none."""
        ...


class WritesLeases(Protocol):
    """Creates or replaces a Lease in one attempt bounded in time."""

    def write_lease(self, body: dict[str, Any], *, create: bool, timeout_s: float) -> dict[str, Any]:
        """The stored Lease (ApiException 409 when it changed since it was read)."""
        ...


# ---- per consumer -----------------------------------------------------------------------------------


class AdminKeyKube(GetsObjects, CreatesObjects, Protocol):
    """`admin_key.ensure_admin_key`: reads the service's Secret, creates it when missing."""


class ServiceReadsKube(GetsObjects, ListsSelected, Protocol):
    """`watched.DirectReads` and `watched.WatchedObjects`: a service, and its pods by their selector."""


class EventsKube(GetsObjects, PostsEvents, Protocol):
    """A service's loop (`handlers.ServiceLoops`) telling an Event: the service's body, then the Event."""


class FastCheckKube(GetsObjects, ListsSelected, MergePatches, PostsEvents, Protocol):
    """`fast_checks.FastChecker`: the service and its pods, pod label patches, Events."""


class CanaryKube(GetsObjects, ListsSelected, PatchesStatus, PostsEvents, Protocol):
    """`canary_analysis.CanaryAnalyst`: the service and its pods, its status, Events."""


class AutoscalerKube(GetsObjects, ListsSelected, PatchesStatus, PostsEvents, Protocol):
    """`autoscaler.Autoscaler`: the service, its pods and admin key Secret, its status, Events."""


class ReconcilerKube(
    GetsObjects,
    ListsObjects,
    CreatesObjects,
    DryRunCreates,
    AppliesObjects,
    DeletesObjects,
    PatchesStatus,
    MergePatches,
    PostsEvents,
    HasResources,
    Protocol,
):
    """`reconciler.Reconciler`: every call above.

    Its GPU inventory lists nodes and pods cluster-wide; a GPU product move releases the old
    ReplicaSets by a merge patch.
    """


class LeaseKube(ReadsLeases, WritesLeases, Protocol):
    """`leader_election.LeaseLock`: the Lease, read and written."""
