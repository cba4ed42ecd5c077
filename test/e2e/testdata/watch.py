"""A watch written with the official Kubernetes Python client, as its users write one: list
ConfigMaps in a namespace of the fleet view, then watch from the list's resourceVersion (the
client sends watch=True). It prints one JSON line when it is watching and one per event, for
the Go test that runs it to check.

Usage: watch.py URL NAMESPACE
"""
import json
import sys

from kubernetes import client, watch

ANNO_CLUSTER = "multicache.io/cluster"


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main():
    cfg = client.Configuration()
    cfg.host = sys.argv[1]
    v1 = client.CoreV1Api(client.ApiClient(cfg))
    ns = sys.argv[2]
    lst = v1.list_namespaced_config_map(ns, _request_timeout=30)
    emit({"op": "list", "items": len(lst.items), "rv": lst.metadata.resource_version})
    w = watch.Watch()
    for ev in w.stream(v1.list_namespaced_config_map, ns, resource_version=lst.metadata.resource_version, timeout_seconds=120):
        cm = ev["object"]
        annos = cm.metadata.annotations or {}
        emit({"op": "event", "type": ev["type"], "cluster": annos.get(ANNO_CLUSTER, ""), "name": cm.metadata.name,
              "labels": cm.metadata.labels or {}})


if __name__ == "__main__":
    main()
