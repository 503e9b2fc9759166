#!/usr/bin/env bash
# Debian packages the project needs on a fresh machine; installs only what is missing.
#   openssl            certificates of the local cluster
#   libpython3.11      the Triton Python backend stub links it
#   libb64-0d          perf_analyzer from tritonclient[all]
#   prometheus-alertmanager   real alerting for tests and the demo (starts no daemon); Prometheus
#                      itself is built from upstream (e2e/build-binaries.sh): Debian's lacks kubernetes_sd
#   unzip              helm ships inside an npm package's zip
#   iproute2           `ip`: pods' host-scoped addresses on lo (e2e/host_addresses.py)
#   containerd runc containernetworking-plugins   the real node beside the node agent's
#                      (e2e/kubelet_node.py): the container runtime and the CNI bridge
#   busybox-static     the root filesystem of the images built for that node (e2e/oci_archive.py)
#   iptables           the kubelet's own chains, which the real node removes when it stops
set -euo pipefail
packages=(openssl libpython3.11 libb64-0d prometheus-alertmanager unzip iproute2
  containerd runc containernetworking-plugins busybox-static iptables)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "[system-deps] all present"
  exit 0
fi
echo "[system-deps] installing: ${missing[*]}"
SUDO=""
[[ $(id -u) -ne 0 ]] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# The Debian packages would start daemons under systemd; there is none here, but be explicit.
for svc in prometheus-alertmanager prometheus-node-exporter containerd; do
  $SUDO systemctl disable --now "$svc" >/dev/null 2>&1 || true
done
echo "[system-deps] done"
