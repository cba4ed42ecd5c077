#!/usr/bin/env bash
# make demo: a 3-cluster local fleet, realistic objects, the daemon on configs/demo.yaml, a few
# real queries; everything runs until Ctrl-C, then everything is stopped.
# make demo PROFILES=1: the same, but the daemon reads its fleet from ClusterProfiles (Cluster
# Inventory API) that fleet-1, the management cluster, holds for fleet-1..3, and reaches each
# cluster through the test exec plugin (test/fleet/cmd/execplugin) instead of a kubeconfig.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
dir=${DEMO_DIR:-$root/.demo}
listen=${DEMO_LISTEN:-127.0.0.1:8080}
server="http://$listen"
bin=$root/bin
start=$SECONDS
profiles=
if [[ -n ${PROFILES:-} && ${PROFILES:-} != 0 ]]; then profiles=1; fi

go -C cmd/multicache build -o "$bin/multicache" .
go build -o "$bin/fleet" ./test/fleet/cmd/fleet
if [[ -n $profiles ]]; then go build -o "$bin/execplugin" ./test/fleet/cmd/execplugin; fi

daemon=
cleanup() {
  trap - EXIT INT TERM
  echo
  echo "demo: stopping"
  if [[ -n $daemon ]] && kill -0 "$daemon" 2>/dev/null; then
    kill "$daemon"; wait "$daemon" 2>/dev/null || true
  fi
  "$bin/fleet" down --dir "$dir" 2>/dev/null || true
}
trap cleanup EXIT INT TERM

if [[ -f $dir/state.json ]]; then "$bin/fleet" down --dir "$dir" || true; fi
"$bin/fleet" up --dir "$dir" --clusters 3
# Namespaces, Nodes with zone labels, Deployments, Pods on nodes with varied images,
# ConfigMaps, and the Widget CRD with objects in fleet-1 and fleet-2 only.
"$bin/fleet" seed --dir "$dir" --objects 2000 --crd-clusters fleet-1,fleet-2

if [[ -n $profiles ]]; then
  # fleet-1 is the management cluster: the ClusterProfile CRD, the inventory namespace and one
  # profile per cluster, written as a cluster manager writes it (the object, then its status).
  # admin.kubeconfig holds system:masters client certificates, one context per cluster.
  inventory=fleet-inventory
  mgmt_kubeconfig=$dir/admin.kubeconfig
  mgmt_context=fleet-1
  mgmt() { "$bin/kubectl" --kubeconfig "$mgmt_kubeconfig" --context "$mgmt_context" "$@"; }
  fleet_dir=$(cd "$dir" && pwd)
  mgmt apply -f deploy/crds/clusterprofiles.yaml
  mgmt wait --for condition=established --timeout 60s crd/clusterprofiles.multicluster.x-k8s.io
  mgmt create namespace "$inventory"
  for c in fleet-1 fleet-2 fleet-3; do
    url=$("$bin/kubectl" config view --kubeconfig "$mgmt_kubeconfig" -o jsonpath="{.clusters[?(@.name==\"$c\")].cluster.server}")
    ca=$(base64 -w0 "$dir/$c/ca.crt")
    mgmt create -f - <<EOF
apiVersion: multicluster.x-k8s.io/v1alpha1
kind: ClusterProfile
metadata:
  name: $c
  namespace: $inventory
  labels:
    x-k8s.io/cluster-manager: demo
spec:
  displayName: $c
  clusterManager:
    name: demo
EOF
    mgmt patch clusterprofile "$c" -n "$inventory" --subresource=status --type=merge -p "$(cat <<EOF
{"status": {
  "conditions": [{"type": "ControlPlaneHealthy", "status": "True", "reason": "Probed",
    "message": "probed by make demo", "lastTransitionTime": "$(date -u +%Y-%m-%dT%H:%M:%SZ)"}],
  "accessProviders": [{"name": "fleet-tokens", "cluster": {"server": "$url", "certificate-authority-data": "$ca",
    "extensions": [{"name": "client.authentication.k8s.io/exec", "extension": {"cluster": "$c"}}]}}]}}
EOF
)"
  done
  # The access provider the profiles name: the test plugin hands out each cluster's exec token.
  cat > "$dir/providers.json" <<EOF
{"providers": [{"name": "fleet-tokens", "execConfig": {"apiVersion": "client.authentication.k8s.io/v1",
  "command": "$bin/execplugin", "args": ["--fleet-dir", "$fleet_dir"], "provideClusterInfo": true}}]}
EOF
  # No --kubeconfig, and configs/demo.yaml names no kubeconfig paths: the fleet is the profiles.
  "$bin/multicache" serve --config configs/demo.yaml --cluster-profiles "$inventory" \
    --cluster-profile-provider-file "$dir/providers.json" \
    --management-kubeconfig "$mgmt_kubeconfig" --management-context "$mgmt_context" --listen "$listen" \
    > "$dir/multicache.log" 2>&1 &
else
  "$bin/multicache" serve --config configs/demo.yaml --kubeconfig "$dir/kubeconfig" --listen "$listen" \
    > "$dir/multicache.log" 2>&1 &
fi
daemon=$!
for _ in $(seq 1 600); do
  if curl -fsS "$server/readyz" >/dev/null 2>&1; then break; fi
  if ! kill -0 "$daemon" 2>/dev/null; then echo "demo: daemon exited:"; tail -20 "$dir/multicache.log"; exit 1; fi
  sleep 0.1
done
echo "demo: fleet seeded and daemon ready in $((SECONDS - start))s (log: $dir/multicache.log)"

run() {
  echo
  echo "\$ $*"
  "$@"
}
mc() { "$bin/multicache" --server "$server" "$@"; }
export MULTICACHE_SERVER=$server
run "$bin/multicache" clusters
if [[ -n $profiles ]]; then
  # Where each cluster came from (the daemon's log), and the inventory it was read from.
  echo
  echo "\$ grep -o 'engaging cluster.*' $dir/multicache.log"
  grep -o 'engaging cluster.*' "$dir/multicache.log"
  run "$bin/kubectl" --kubeconfig "$mgmt_kubeconfig" --context "$mgmt_context" get clusterprofiles -n "$inventory"
fi
run "$bin/multicache" get pods -n load-3 --field-selector image=nginx:1.27.3 -l tier=frontend
run "$bin/multicache" get nodes -l topology.kubernetes.io/zone=zone-b,node.kubernetes.io/instance-type=m5.xlarge --field-selector metadata.name=node-1 -o wide
run "$bin/multicache" get widgets -n load-0 -l color=red
# The same memory, as a Kubernetes API: kubectl reads the fleet as one API server.
kubectl() { KUBECONFIG=/dev/null "$bin/kubectl" "$@"; }
run kubectl --server "$server" get pods -n load-3 -l app=app-3 -o wide
run kubectl --server "$server" get widgets -n load-0 -l color=red -o wide
run kubectl --server "$server" get clusters.multicache.io
run curl -s "$server/multicache/v1/resources/pods?index=pod-node&value=node-7&limit=2" -o /dev/null -w "HTTP %{http_code}, %{size_download} bytes in %{time_total}s\n"
echo
echo "\$ curl -s '$server/multicache/v1/resources/widgets?limit=1' | jq .clusters   # which clusters serve the CRD"
# jq's own output (JSON, indented by two), printed by Python, which every machine here has.
curl -s "$server/multicache/v1/resources/widgets?limit=1" | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["clusters"], indent=2))'

echo
echo "demo: running. Try: $bin/multicache get deploy -A    |    $bin/multicache clusters --watch"
echo "demo:              $bin/kubectl --server $server get deploy -A -w    |    $bin/kubectl --server $server api-resources"
echo "demo: kubeconfig for kubectl: $dir/kubeconfig (contexts fleet-1..3). Ctrl-C stops everything."
if [[ -n $profiles ]]; then
  echo "demo: the fleet's inventory: $bin/kubectl --kubeconfig $mgmt_kubeconfig --context $mgmt_context get clusterprofiles -n $inventory -o yaml"
fi
wait "$daemon"
