#!/usr/bin/env bash
# Builds the pinned local-fleet binaries into BIN_DIR (default ./bin) from the Go module proxy.
#   kube-apiserver, kube-controller-manager,
#   kubectl                                  <- hack/tools/apiserver (k8s.io/kubernetes v1.37.1)
#   etcd                                     <- hack/tools/etcd (go.etcd.io/etcd/server/v3 v3.7.0)
#   k9s                                      <- github.com/derailed/k9s (go install, pinned below)
#   golangci-lint                            <- github.com/golangci/golangci-lint/v2 (go install, pinned below)
# A binary is rebuilt only when it is missing or its tools module (go.mod, go.sum) changed:
# a stamp file beside each binary records the hash it was built from.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bin=${BIN_DIR:-$root/bin}
mkdir -p "$bin"

k8s_version=v1.37.1
ldflags_k8s="-s -w \
 -X k8s.io/component-base/version.gitVersion=${k8s_version} \
 -X k8s.io/component-base/version.gitMajor=1 \
 -X k8s.io/component-base/version.gitMinor=37 \
 -X k8s.io/component-base/version.gitTreeState=clean \
 -X k8s.io/client-go/pkg/version.gitVersion=${k8s_version} \
 -X k8s.io/client-go/pkg/version.gitMajor=1 \
 -X k8s.io/client-go/pkg/version.gitMinor=37"

stamp_of() { cat "$1/go.mod" "$1/go.sum" "$0" | sha256sum | cut -c1-16; }

# build NAME MODULE_DIR PACKAGE LDFLAGS
build() {
  local name=$1 dir=$2 pkg=$3 flags=$4
  local out="$bin/$name" want
  want=$(stamp_of "$dir")
  if [[ -x $out && -f $out.stamp && $(cat "$out.stamp") == "$want" ]]; then
    echo "tools: $name is up to date"
    return
  fi
  echo "tools: building $name from $pkg (cold builds take minutes)"
  local start=$SECONDS
  (cd "$dir" && CGO_ENABLED=0 go build -trimpath -ldflags "$flags" -o "$out.tmp" "$pkg")
  mv "$out.tmp" "$out"
  echo "$want" > "$out.stamp"
  echo "tools: built $name in $((SECONDS - start))s"
}

k9s_version=v0.50.16
golangci_lint_version=v2.15.0

# install NAME PACKAGE@VERSION builds a tool with go install at its pinned version, which uses
# the tool's own go.mod.
install() {
  local name=$1 pkg=$2
  local out="$bin/$name" want
  want=$(echo "$pkg" | cat - "$0" | sha256sum | cut -c1-16)
  if [[ -x $out && -f $out.stamp && $(cat "$out.stamp") == "$want" ]]; then
    echo "tools: $name is up to date"
    return
  fi
  echo "tools: building $pkg (cold builds take minutes)"
  local start=$SECONDS tmp
  tmp=$(mktemp -d)
  CGO_ENABLED=0 GOBIN=$tmp go install -trimpath -ldflags "-s -w" "$pkg"
  mv "$tmp/$name" "$out"
  rmdir "$tmp"
  echo "$want" > "$out.stamp"
  echo "tools: built $name in $((SECONDS - start))s"
}

want=${*:-etcd kube-apiserver kubectl}
for t in $want; do
  case $t in
    etcd) build etcd "$root/hack/tools/etcd" go.etcd.io/etcd/server/v3 "-s -w" ;;
    kube-apiserver) build kube-apiserver "$root/hack/tools/apiserver" k8s.io/kubernetes/cmd/kube-apiserver "$ldflags_k8s" ;;
    kube-controller-manager) build kube-controller-manager "$root/hack/tools/apiserver" k8s.io/kubernetes/cmd/kube-controller-manager "$ldflags_k8s" ;;
    kubectl) build kubectl "$root/hack/tools/apiserver" k8s.io/kubernetes/cmd/kubectl "$ldflags_k8s" ;;
    k9s) install k9s "github.com/derailed/k9s@$k9s_version" ;;
    golangci-lint) install golangci-lint "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$golangci_lint_version" ;;
    *) echo "tools: unknown tool '$t' (want etcd, kube-apiserver, kube-controller-manager, kubectl, k9s, golangci-lint)" >&2; exit 2 ;;
  esac
done
