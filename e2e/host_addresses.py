"""Host-scoped pod addresses on the loopback interface: pod IPs that Kubernetes accepts as endpoints.

A pod here is a process on this machine, so its IP must be an address of this machine. Loopback
addresses (127.0.0.0/8) were the obvious choice, but the API server refuses them in EndpointSlices
(`may not be in the loopback range`): a Service would then never list a pod, so nothing that reads a
Service's endpoints (the activator, a kube-proxy-like client, the operator's routing of a service at
zero) could be tested. So each pod gets an address of a private range instead, added to `lo` with
`scope host`: like a loopback address it is reachable from this machine only (the kernel neither
announces nor routes it elsewhere), and like a CNI's pod IP it is valid in a Service's endpoints.

Adding an address needs CAP_NET_ADMIN (root, as the project's setup runs); `ip` is iproute2's.
"""

from __future__ import annotations

import ipaddress
import shutil
import subprocess

#: The real node's pods (the node agent) and the simulated nodes' pods (KWOK): private, unrouted.
REAL_POD_NETWORK = ipaddress.IPv4Network("10.65.0.0/16")
KWOK_POD_NETWORK = ipaddress.IPv4Network("10.64.0.0/16")


class HostAddressError(RuntimeError):
    """An address could not be added (no CAP_NET_ADMIN, or no `ip`)."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    ip = shutil.which("ip") or "/usr/sbin/ip"
    try:
        result = subprocess.run([ip, *args], capture_output=True, text=True, timeout=10, check=False)
    except FileNotFoundError as error:
        missing = "`ip` (iproute2) is missing: e2e/install-system-deps.sh installs it"
        raise HostAddressError(missing) from error
    if check and result.returncode != 0:
        raise HostAddressError(
            f"`ip {' '.join(args)}` failed ({result.returncode}): {result.stderr.strip()}; pod addresses "
            "need CAP_NET_ADMIN (run as root, as the project's setup does)"
        )
    return result


def addresses(network: ipaddress.IPv4Network) -> set[str]:
    """The addresses of `network` on `lo` now."""
    out = _ip("-o", "-4", "addr", "show", "dev", "lo").stdout
    found = set()
    for line in out.splitlines():
        fields = line.split()
        if "inet" in fields:
            address = fields[fields.index("inet") + 1].split("/")[0]
            if ipaddress.IPv4Address(address) in network:
                found.add(address)
    return found


def add(address: str) -> None:
    """Put `address` on `lo` (host scope); already there is fine."""
    result = _ip("addr", "add", f"{address}/32", "dev", "lo", "scope", "host", check=False)
    # The kernel's "exists" answer reads "File exists" or "Address already assigned" by iproute2 version.
    if result.returncode != 0 and not any(m in result.stderr for m in ("File exists", "already assigned")):
        _ip("addr", "add", f"{address}/32", "dev", "lo", "scope", "host")  # raises with the error


def remove(address: str) -> None:
    """Take `address` off `lo`; already gone is fine."""
    _ip("addr", "del", f"{address}/32", "dev", "lo", check=False)


def remove_all(network: ipaddress.IPv4Network, *, keep: set[str] | frozenset[str] = frozenset()) -> int:
    """Take every address of `network` off `lo` but `keep`; return how many went."""
    gone = 0
    for address in addresses(network) - set(keep):
        remove(address)
        gone += 1
    return gone
