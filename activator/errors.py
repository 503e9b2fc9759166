"""Why the activator did not forward a request: one exception per answer, each with its message.

The HTTP and gRPC front ends map each type to their own status (`http_proxy.HTTP_STATUS`,
`grpc_proxy.GRPC_STATUS`), and both send `message` as is: the same words whichever protocol the
client speaks. The messages name the bound and its value, so a client (or whoever reads its logs)
knows which setting refused it.
"""

from __future__ import annotations

from tailpilot.activator.routing import HOST_FORMS, ServiceKey


class ActivationError(Exception):
    """A request the activator answers itself instead of forwarding."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class UnknownService(ActivationError):
    """The host names no TailPilot service (HTTP 404, gRPC NOT_FOUND)."""

    @classmethod
    def unparsable(cls, host: str) -> UnknownService:
        """A host that is neither a Service's DNS name nor a known cluster IP."""
        return cls(f"no TailPilot service for host {_bounded(host)!r}: expected {HOST_FORMS}")

    @classmethod
    def unknown(cls, key: ServiceKey, host: str) -> UnknownService:
        """A host in a valid form naming a service TailPilot does not serve."""
        return cls(f"no TailPilot InferenceService {key} (host {_bounded(host)!r})")


class BodyTooLarge(ActivationError):
    """The request body is over the maximum size (HTTP 413, gRPC RESOURCE_EXHAUSTED)."""

    @classmethod
    def over(cls, *, body_bytes: int | None, max_body_bytes: int) -> BodyTooLarge:
        """The message for a body of `body_bytes` (None: unknown, it was cut off while read)."""
        size = "" if body_bytes is None else f" of {body_bytes} bytes"
        return cls(
            f"request body{size} is over the activator's maximum of {max_body_bytes} bytes (max body bytes)"
        )


class HoldRefused(ActivationError):
    """A bound on held requests is reached (HTTP 503 with Retry-After, gRPC RESOURCE_EXHAUSTED)."""

    def __init__(self, message: str, *, bound: str, limit: int) -> None:
        super().__init__(message)
        self.bound = bound
        self.limit = limit


class HoldTimedOut(ActivationError):
    """No replica became ready within the hold timeout (HTTP 504, gRPC UNAVAILABLE)."""

    @classmethod
    def after(cls, *, key: ServiceKey, timeout_s: float) -> HoldTimedOut:
        """The message for a request held `timeout_s` (the hold timeout, or the client's shorter deadline)."""
        return cls(f"no replica of {key} became ready within the hold timeout of {timeout_s:g} s")


class ClientDeadlinePassed(ActivationError):
    """The client's deadline, shorter than the hold timeout, passed while held (gRPC DEADLINE_EXCEEDED)."""

    @classmethod
    def after(cls, *, key: ServiceKey, deadline_s: float) -> ClientDeadlinePassed:
        """The message for a call whose deadline was `deadline_s` away when it arrived."""
        return cls(f"the call's deadline ({deadline_s:.3g} s) passed before a replica of {key} became ready")


class BackendsFailed(ActivationError):
    """Every backend tried failed to answer (HTTP 502, gRPC UNAVAILABLE)."""

    @classmethod
    def after(cls, *, key: ServiceKey, tries: int, last_error: str) -> BackendsFailed:
        """The message after `tries` backends failed, the last with `last_error`."""
        if tries == 0:
            return cls(f"no ready replica of {key} is left to forward to")
        return cls(f"{tries} replica(s) of {key} failed to answer; last error: {last_error}")


class BackendTimedOut(ActivationError):
    """The backend took longer than the forward timeout (HTTP 504, gRPC DEADLINE_EXCEEDED)."""

    @classmethod
    def after(cls, *, key: ServiceKey, timeout_s: float) -> BackendTimedOut:
        """The message for a backend of `key` silent for `timeout_s` (the forward timeout)."""
        return cls(f"a replica of {key} did not answer within the forward timeout of {timeout_s:g} s")


class BackendUnreachable(Exception):
    """A backend could not be reached or dropped the connection before answering: try another.

    Raised by a front end's send function, caught by the activation, never shown to a client as is.
    """


#: The longest host an error quotes: a DNS name's limit. A client's header is echoed to it, not further.
MAX_QUOTED_HOST = 253


def _bounded(host: str) -> str:
    return host if len(host) <= MAX_QUOTED_HOST else host[:MAX_QUOTED_HOST] + "..."
