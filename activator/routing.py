"""Which service a request is for, from the host it was sent to (pure).

Clients call a model's Service by DNS (`NAME.NS.svc.cluster.local:8000`, or any of its shorter
forms) or by its cluster IP; while the service has no ready replica, that Service routes to the
activator, and the HTTP `Host` header (gRPC: the `:authority`) is all that is left of the address
the client used: kube-proxy rewrote the destination to the activator's pod. So the host is parsed
here, and a cluster IP is looked up in the table the Kubernetes adapter keeps of the model
Services' IPs.

A bare `NAME` (a client in the model's own namespace using the short name) names no namespace: it
is not resolved, since the activator serves every namespace and cannot tell which one was meant.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass

#: An RFC 1123 DNS label: what Kubernetes allows as a Service or namespace name.
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
#: The label after NAME.NS in a Service's DNS names (`NAME.NS.svc.CLUSTER-DOMAIN`).
_SERVICE_ZONE = "svc"

#: What a host must look like; quoted in the error an unknown host gets.
HOST_FORMS = "NAME.NAMESPACE, NAME.NAMESPACE.svc, NAME.NAMESPACE.svc.CLUSTER-DOMAIN or a Service's cluster IP"


@dataclass(frozen=True, order=True)
class ServiceKey:
    """One model service: the namespace and name of its InferenceService (and of its Service)."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


def host_without_port(host: str) -> str:
    """The host part of a `Host` header or `:authority`: port, IPv6 brackets and a trailing dot removed.

    Examples: `m.ns:8000` -> `m.ns`; `[fd00::1]:8001` -> `fd00::1`; `10.0.0.7` -> `10.0.0.7`.
    """
    host = host.strip()
    if host.startswith("["):
        closing = host.find("]")
        return host[1:closing] if closing > 0 else host
    if host.count(":") == 1:
        host = host.split(":", 1)[0]
    return host.rstrip(".").lower()


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def service_for_host(host: str, *, service_for_ip: Callable[[str], ServiceKey | None]) -> ServiceKey | None:
    """The service a request sent to `host` is for, or None when the host names none.

    Args:
        host: The HTTP `Host` header or the gRPC `:authority`, with or without a port.
        service_for_ip: The model Service that has a cluster IP (the Kubernetes adapter's table).

    The DNS forms are `NAME.NS`, `NAME.NS.svc` and `NAME.NS.svc.<cluster domain>` (any domain: the
    cluster's is not known here, and nothing else that resolves inside a cluster reaches the
    activator with `svc` as its third label).
    """
    bare = host_without_port(host)
    if _is_ip(bare):
        return service_for_ip(str(ipaddress.ip_address(bare)))
    labels = bare.split(".")
    if len(labels) < 2 or not all(_DNS_LABEL.fullmatch(label) for label in labels):
        return None
    if len(labels) > 2 and labels[2] != _SERVICE_ZONE:
        return None
    return ServiceKey(namespace=labels[1], name=labels[0])
