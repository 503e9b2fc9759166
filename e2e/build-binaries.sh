#!/usr/bin/env bash
# Builds the local cluster's binaries from upstream Go modules, once.
#
# Output: $TAILPILOT_CACHE/bin/<component>-<version>/<binary>; a warm run
# finds every binary present and builds nothing. No registry here packages
# kube-apiserver, kind or k3s, so we build them: k8s.io/kubernetes has
# replace directives for its staging modules and cannot be `go install`ed, so
# a generated wrapper module requires it and replaces each staging module with
# its published v0.<minor>.<patch> tag.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=versions.env
source "$here/versions.env"
cache="${TAILPILOT_CACHE:-$HOME/.cache/tailpilot}"
export CGO_ENABLED=0 GOFLAGS=-buildvcs=false

log() { printf '[build-binaries] %s\n' "$*" >&2; }

k8s_dir="$cache/bin/kubernetes-$KUBERNETES_VERSION"
etcd_dir="$cache/bin/etcd-$ETCD_VERSION"
kwok_dir="$cache/bin/kwok-$KWOK_VERSION"
prometheus_dir="$cache/bin/prometheus-$PROMETHEUS_VERSION"
versitygw_dir="$cache/bin/versitygw-$VERSITYGW_VERSION"
distribution_dir="$cache/bin/distribution-$DISTRIBUTION_VERSION"
prometheus_operator_dir="$cache/bin/prometheus-operator-$PROMETHEUS_OPERATOR_VERSION"

build_kubernetes() {
  # The kubelet and kube-proxy run the real node (e2e/kubelet_node.py) beside the node agent's.
  local want=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy)
  local missing=()
  for b in "${want[@]}"; do [[ -x "$k8s_dir/$b" ]] || missing+=("$b"); done
  [[ ${#missing[@]} -eq 0 ]] && { log "kubernetes $KUBERNETES_VERSION: cached"; return; }
  log "kubernetes $KUBERNETES_VERSION: building ${missing[*]} (cold: many minutes on 2 cores)"
  local src="$cache/src/kubernetes-$KUBERNETES_VERSION"
  mkdir -p "$src" "$k8s_dir.tmp"
  local gomod
  gomod="$(go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
  local staging_version="v0.${KUBERNETES_VERSION#v1.}"
  {
    echo "module tailpilot.local/k8sbuild"
    echo
    echo "go $(sed -n 's/^go //p' "$gomod")"
    echo
    echo "require k8s.io/kubernetes $KUBERNETES_VERSION"
    echo
    echo "replace ("
    sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\t\1 => \1 '"$staging_version"'#p' "$gomod"
    echo ")"
  } > "$src/go.mod"
  cat > "$src/tools.go" <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
)
GO
  (cd "$src" && go mod tidy -e >/dev/null 2>&1 || true; cd "$src" && go mod download)
  local git_version="$KUBERNETES_VERSION"
  local major minor
  major=1; minor="$(echo "$KUBERNETES_VERSION" | cut -d. -f2)"
  local ld="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $pkg.gitVersion=$git_version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
    ld+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  for b in "${missing[@]}"; do
    log "  go build $b"
    (cd "$src" && go build -trimpath -ldflags "$ld" -o "$k8s_dir.tmp/$b" "k8s.io/kubernetes/cmd/$b")
  done
  mkdir -p "$k8s_dir"
  for b in "${missing[@]}"; do mv "$k8s_dir.tmp/$b" "$k8s_dir/$b"; done
  rmdir "$k8s_dir.tmp"
}

build_etcd() {
  [[ -x "$etcd_dir/etcd" ]] && { log "etcd $ETCD_VERSION: cached"; return; }
  log "etcd $ETCD_VERSION: building"
  local src="$cache/src/etcd-$ETCD_VERSION"
  mkdir -p "$src" "$etcd_dir"
  cat > "$src/go.mod" <<GOMOD
module tailpilot.local/etcdbuild

go 1.24

require go.etcd.io/etcd/server/v3 $ETCD_VERSION
GOMOD
  cat > "$src/main.go" <<'GO'
// Command etcd runs the upstream etcd server's main.
package main

import "go.etcd.io/etcd/server/v3/etcdmain"

func main() { etcdmain.Main(os.Args) }
GO
  # etcdmain.Main takes the args; keep the import list honest.
  sed -i 's#import "go.etcd.io/etcd/server/v3/etcdmain"#import (\n\t"os"\n\n\t"go.etcd.io/etcd/server/v3/etcdmain"\n)#' "$src/main.go"
  (cd "$src" && go mod tidy && go build -trimpath -ldflags "-s -w" -o "$etcd_dir/etcd.tmp" . && mv "$etcd_dir/etcd.tmp" "$etcd_dir/etcd")
}

build_kwok() {
  [[ -x "$kwok_dir/kwok" ]] && { log "kwok $KWOK_VERSION: cached"; return; }
  log "kwok $KWOK_VERSION: building"
  mkdir -p "$kwok_dir"
  GOBIN="$kwok_dir" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
}

build_versitygw() {
  # The S3-compatible store the build's s3:// source is tested against (e2e/object_store.py).
  [[ -x "$versitygw_dir/versitygw" ]] && { log "versitygw $VERSITYGW_VERSION: cached"; return; }
  log "versitygw $VERSITYGW_VERSION: building (cold: about 1.5 min on 2 cores)"
  mkdir -p "$versitygw_dir"
  GOBIN="$versitygw_dir" go install -trimpath -ldflags "-s -w" \
    "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION"
}

build_distribution() {
  # The OCI registry the build's oci:// source is tested against (e2e/oci_registry.py).
  [[ -x "$distribution_dir/registry" ]] && { log "distribution $DISTRIBUTION_VERSION: cached"; return; }
  log "distribution $DISTRIBUTION_VERSION: building the registry (cold: about 2 min on 2 cores)"
  mkdir -p "$distribution_dir"
  GOBIN="$distribution_dir" go install -trimpath -ldflags "-s -w" \
    "github.com/distribution/distribution/v3/cmd/registry@$DISTRIBUTION_VERSION"
}

build_prometheus_operator() {
  # The operator kube-prometheus-stack runs, and the config reloader it puts beside each
  # Prometheus. Its module replaces its own two submodules (pkg/apis/monitoring, pkg/client) by
  # directory, so `go install` refuses it; a wrapper module requires it and pins the submodules
  # to their published tags of the same version, as build_kubernetes does for the staging modules.
  [[ -x "$prometheus_operator_dir/operator" && -x "$prometheus_operator_dir/prometheus-config-reloader" ]] \
    && { log "prometheus-operator $PROMETHEUS_OPERATOR_VERSION: cached"; return; }
  log "prometheus-operator $PROMETHEUS_OPERATOR_VERSION: building operator and prometheus-config-reloader"
  local src="$cache/src/prometheus-operator-$PROMETHEUS_OPERATOR_VERSION"
  local module=github.com/prometheus-operator/prometheus-operator
  mkdir -p "$src"
  local gomod
  gomod="$(go mod download -json "$module@$PROMETHEUS_OPERATOR_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
  {
    echo "module tailpilot.local/promopbuild"
    echo
    echo "go $(sed -n 's/^go //p' "$gomod")"
    echo
    echo "require $module $PROMETHEUS_OPERATOR_VERSION"
    echo
    echo "replace ("
    echo "	$module/pkg/apis/monitoring => $module/pkg/apis/monitoring $PROMETHEUS_OPERATOR_VERSION"
    echo "	$module/pkg/client => $module/pkg/client $PROMETHEUS_OPERATOR_VERSION"
    echo ")"
  } > "$src/go.mod"
  cat > "$src/tools.go" <<'GO'
//go:build tools

package tools

import (
	_ "github.com/prometheus-operator/prometheus-operator/cmd/operator"
	_ "github.com/prometheus-operator/prometheus-operator/cmd/prometheus-config-reloader"
)
GO
  (cd "$src" && go mod tidy -e >/dev/null 2>&1 || true; cd "$src" && go mod download)
  local ld="-s -w -X github.com/prometheus/common/version.Version=${PROMETHEUS_OPERATOR_VERSION#v}"
  ld+=" -X github.com/prometheus/common/version.Branch=$PROMETHEUS_OPERATOR_VERSION"
  rm -rf "$prometheus_operator_dir.tmp"
  mkdir -p "$prometheus_operator_dir.tmp"
  for b in operator prometheus-config-reloader; do
    log "  go build $b"
    (cd "$src" && go build -trimpath -ldflags "$ld" -o "$prometheus_operator_dir.tmp/$b" "$module/cmd/$b")
  done
  mkdir -p "$prometheus_operator_dir"
  mv "$prometheus_operator_dir.tmp"/* "$prometheus_operator_dir/"
  rmdir "$prometheus_operator_dir.tmp"
}

build_prometheus() {
  # promtool (rule checks and rule unit tests) comes from the same module at the same version.
  [[ -x "$prometheus_dir/prometheus" && -x "$prometheus_dir/promtool" ]] \
    && { log "prometheus $PROMETHEUS_VERSION: cached"; return; }
  log "prometheus $PROMETHEUS_VERSION: building prometheus and promtool (file, http and kubernetes discovery only)"
  rm -rf "$prometheus_dir.tmp"
  mkdir -p "$prometheus_dir.tmp"
  local ld="-s -w -X github.com/prometheus/common/version.Version=${PROMETHEUS_VERSION#v}"
  ld+=" -X github.com/prometheus/common/version.Branch=$PROMETHEUS_VERSION"
  GOBIN="$prometheus_dir.tmp" go install -trimpath -ldflags "$ld" -tags remove_all_sd,enable_kubernetes_sd \
    "github.com/prometheus/prometheus/cmd/prometheus@$PROMETHEUS_MODULE_VERSION" \
    "github.com/prometheus/prometheus/cmd/promtool@$PROMETHEUS_MODULE_VERSION"
  mkdir -p "$prometheus_dir"
  mv "$prometheus_dir.tmp/prometheus" "$prometheus_dir.tmp/promtool" "$prometheus_dir/"
  rmdir "$prometheus_dir.tmp"
}

for c in "${@:-kubernetes etcd kwok prometheus prometheus_operator versitygw distribution}"; do
  for part in $c; do "build_$part"; done
done
log "binaries ready under $cache/bin"
