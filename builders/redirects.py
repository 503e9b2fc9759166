"""Which redirects a download may follow (pure, but for resolving a host name).

Every network source of the build follows redirects by these rules (https URLs, an OCI registry's
blob downloads, a Hugging Face Hub's CDN): a registry or a Hub may send the bytes from another
host, but never somewhere the build pod's network position would be abused.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from urllib.parse import urlparse

#: Redirects followed before a download is refused.
MAX_REDIRECTS = 5


def _internal(host: str, resolve: Callable[[str], list[str]]) -> bool:
    """Whether `host` is, or resolves to, a loopback, link-local or private address."""
    try:
        addresses = [host] if _is_ip(host) else resolve(host)
    except OSError:
        return False  # unresolvable: the request fails on its own
    return any(
        (ip := ipaddress.ip_address(a.split("%")[0])).is_loopback or ip.is_link_local or ip.is_private
        for a in addresses
    )


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _resolve(host: str) -> list[str]:
    return [str(info[4][0]) for info in socket.getaddrinfo(host, None)]


def redirect_refusal(
    origin: str, target: str, *, resolve: Callable[[str], list[str]] = _resolve
) -> str | None:
    """Why a download may not follow a redirect from `origin` to `target` (None: it may).

    A redirect may not downgrade https to http (the bytes are hashed, but the request and its
    headers would travel in the clear), nor lead from a public host to an internal address (the
    cluster's services, the node, a cloud metadata endpoint): the build pod's network position is
    not the model host's to use. A model served from inside the cluster may redirect inside it.
    """
    was, goes = urlparse(origin), urlparse(target)
    if goes.scheme not in {"http", "https"}:
        return f"a redirect to {goes.scheme or 'no'} scheme"
    if was.scheme == "https" and goes.scheme != "https":
        return "a redirect from https to http"
    if _internal(goes.hostname or "", resolve) and not _internal(was.hostname or "", resolve):
        return f"a redirect from a public host to the internal address of {goes.hostname}"
    return None
