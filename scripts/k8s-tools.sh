#!/usr/bin/env bash
# Builds the Kubernetes parts the controller's tests run against into $SANDBOXD_TOOLS (default
# ~/.cache/sandboxd/bin), outside the repo: a real kube-apiserver, kube-scheduler and
# kube-controller-manager from the k8s.io/kubernetes Go module, etcd from its Go module, and kwok (which plays the kubelets of fake
# Nodes, so scheduled Pods become Running with IPs); kubectl too, to run sbx as its plugin. Each binary carries a version stamp, so a second run
# returns at once. Called by scripts/setup.sh; runs alone too.
#
# k8s.io/kubernetes cannot be built with `go install`: its go.mod replaces each k8s.io staging
# module with a directory of its own tree, and replace directives only count in the main module.
# A throwaway wrapper module requires it and replaces each staging module with its published tag
# (v0.X.Y for v1.X.Y). etcd's server module has the same shape (replaces pointing at sibling
# directories), so it gets a wrapper too. Debian's etcd (3.4) is older than kube-apiserver wants.
set -euo pipefail

: "${SANDBOXD_TOOLS:=${XDG_CACHE_HOME:-$HOME/.cache}/sandboxd/bin}"

K8S_VERSION=v1.36.3
ETCD_VERSION=v3.6.5
KWOK_VERSION=v0.8.0
# helm, to install the chart (deploy/helm/sandboxd) in test/controller/test_helm.py.
HELM_VERSION=v3.22.0

log() { printf 'k8s-tools: %s\n' "$*" >&2; }

# 2 cores are shared by everyone on a machine: keep the Go build narrow and the binaries small.
GO_BUILD=(go build -p 2 -trimpath -buildvcs=false)

fresh() { # fresh NAME STAMP: true when $SANDBOXD_TOOLS/NAME is built from STAMP already
  [ -x "$SANDBOXD_TOOLS/$1" ] && [ "$(cat "$SANDBOXD_TOOLS/.$1.version" 2>/dev/null)" = "$2" ]
}

# wrapper DIR MODULE VERSION [REPLACE...]: a main module that requires MODULE@VERSION.
wrapper() {
  local dir=$1 mod=$2 ver=$3
  shift 3
  {
    printf 'module sandboxd-k8s-tools\n\ngo 1.24\n\nrequire %s %s\n' "$mod" "$ver"
    for r in "$@"; do printf 'replace %s\n' "$r"; done
  } >"$dir/go.mod"
}

# build_kube NAME: builds k8s.io/kubernetes/cmd/NAME. The second one reuses most of the first
# one's Go build cache.
build_kube() {
  local name=$1 stamp="k8s.io/kubernetes@$K8S_VERSION" tmp gomod staging minor t0
  fresh "$name" "$stamp" && return 0
  log "building $name $K8S_VERSION (the first build takes long on 2 cores)"
  t0=$(date +%s)
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN
  gomod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" |
    sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
  [ -f "$gomod" ] || { log "no go.mod for k8s.io/kubernetes@$K8S_VERSION"; return 1; }
  staging="v0.${K8S_VERSION#v1.}"
  minor=${K8S_VERSION#v1.}
  minor=${minor%%.*}
  local replaces=()
  while read -r m; do
    replaces+=("$m => $m $staging")
  done < <(sed -n 's|^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => \./staging/.*|\1|p' "$gomod")
  [ ${#replaces[@]} -gt 10 ] || { log "no staging modules found in $gomod"; return 1; }
  wrapper "$tmp" k8s.io/kubernetes "$K8S_VERSION" "${replaces[@]}"
  local v=k8s.io/component-base/version
  (cd "$tmp" && GOFLAGS=-mod=mod "${GO_BUILD[@]}" \
    -ldflags="-s -w -X $v.gitVersion=$K8S_VERSION -X $v.gitMajor=1 -X $v.gitMinor=$minor" \
    -o "$SANDBOXD_TOOLS/$name" "k8s.io/kubernetes/cmd/$name")
  echo "$stamp" >"$SANDBOXD_TOOLS/.$name.version"
  log "$name built in $(($(date +%s) - t0)) s"
}

# build_wrapped NAME MODULE VERSION PACKAGE [LDFLAGS]: builds PACKAGE of MODULE@VERSION through a
# wrapper.
build_wrapped() {
  local name=$1 mod=$2 ver=$3 pkg=$4 ldflags=${5:-} tmp t0
  fresh "$name" "$mod@$ver" && return 0
  log "building $name from $mod@$ver"
  t0=$(date +%s)
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN
  wrapper "$tmp" "$mod" "$ver"
  (cd "$tmp" && GOFLAGS=-mod=mod "${GO_BUILD[@]}" -ldflags="-s -w $ldflags" \
    -o "$SANDBOXD_TOOLS/$name" "$pkg")
  echo "$mod@$ver" >"$SANDBOXD_TOOLS/.$name.version"
  log "$name built in $(($(date +%s) - t0)) s"
}

mkdir -p "$SANDBOXD_TOOLS"
build_wrapped etcd go.etcd.io/etcd/server/v3 "$ETCD_VERSION" go.etcd.io/etcd/server/v3
build_wrapped kwok sigs.k8s.io/kwok "$KWOK_VERSION" sigs.k8s.io/kwok/cmd/kwok
build_kube kube-apiserver
build_kube kube-scheduler
# kube-controller-manager, for owner-reference garbage collection and PV binding in the tests.
build_kube kube-controller-manager
# kubectl, to test sbx as a kubectl plugin (`kubectl sandbox ...`) for real.
build_kube kubectl
# helm: its version string is a link-time variable, which `helm version` and the charts'
# kubeVersion checks read.
build_wrapped helm helm.sh/helm/v3 "$HELM_VERSION" helm.sh/helm/v3/cmd/helm \
  "-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
