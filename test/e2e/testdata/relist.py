"""A list-then-watch client written with the official Kubernetes Python client, as its users
write one: list ConfigMaps in every namespace, watch from the list's resourceVersion (the
client sends watch=True), and list again whenever the watch ends. It prints one JSON line per
list and per event, for the Go test that runs it to check.

Usage: relist.py URL TOKEN [CA-FILE]
"""
import json
import sys
import time

from kubernetes import client, watch

ANNO_CLUSTER = "multicache.io/cluster"
ANNO_RV = "multicache.io/resource-version"


def key(cm):
    annos = cm.metadata.annotations or {}
    return "%s|%s/%s" % (annos.get(ANNO_CLUSTER, ""), cm.metadata.namespace, cm.metadata.name), annos.get(ANNO_RV, "")


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main():
    cfg = client.Configuration()
    cfg.host = sys.argv[1]
    cfg.api_key = {"authorization": sys.argv[2]}
    cfg.api_key_prefix = {"authorization": "Bearer"}
    if len(sys.argv) > 3:
        cfg.ssl_ca_cert = sys.argv[3]
    v1 = client.CoreV1Api(client.ApiClient(cfg))
    while True:
        try:
            lst = v1.list_config_map_for_all_namespaces(_request_timeout=30)
        except Exception as e:  # 429 while a cluster moves, the replica restarting, ...
            emit({"op": "error", "why": str(e).splitlines()[0]})
            time.sleep(0.2)
            continue
        items = {}
        for cm in lst.items:
            k, rv = key(cm)
            items[k] = rv
        emit({"op": "list", "items": items})
        try:
            for ev in watch.Watch().stream(v1.list_config_map_for_all_namespaces,
                                           resource_version=lst.metadata.resource_version,
                                           allow_watch_bookmarks=True, timeout_seconds=300,
                                           _request_timeout=330):
                if ev["type"] in ("ADDED", "MODIFIED", "DELETED"):
                    k, rv = key(ev["object"])
                    emit({"op": "event", "type": ev["type"], "key": k, "rv": rv})
        except Exception as e:  # 410 after a move, the replica going away, ...
            emit({"op": "ended", "why": str(e).splitlines()[0]})
            continue
        emit({"op": "ended", "why": "the stream ended"})


if __name__ == "__main__":
    main()
