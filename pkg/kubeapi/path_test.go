package kubeapi

import (
	"net/http/httptest"
	"testing"
)

func TestParseKubePath(t *testing.T) {
	for _, tc := range []struct {
		path string
		want path
		err  bool
	}{
		{path: "/version", want: path{what: "version"}},
		{path: "/clusters/east/apis", want: path{cluster: "east", what: "apis"}},
		{path: "/apis/apps", want: path{what: "group", group: "apps"}},
		{path: "/api/v1", want: path{what: "resources", version: "v1"}},
		{path: "/apis/apps/v1/", want: path{what: "resources", group: "apps", version: "v1"}},
		{path: "/api/v1/pods", want: path{what: "object", version: "v1", resource: "pods", clusterScope: true}},
		{path: "/api/v1/namespaces/ns/pods/p", want: path{what: "object", version: "v1", namespace: "ns", resource: "pods", name: "p", namespacedPath: true}},
		{path: "/api/v1/namespaces/ns", want: path{what: "object", version: "v1", resource: "namespaces", name: "ns", clusterScope: true}},
		{path: "/api/v1/namespaces/ns/pods/p/log", want: path{what: "object", version: "v1", namespace: "ns", resource: "pods", name: "p", subresource: "log", namespacedPath: true}},
		{path: "/clusters/west/apis/apps/v1/watch/namespaces/ns/deployments", want: path{cluster: "west", what: "object", group: "apps", version: "v1", namespace: "ns", resource: "deployments", watchPath: true, namespacedPath: true}},
		{path: "/clusters//api", err: true},
		{path: "/nope", err: true},
	} {
		got, ok, err := parsePath(tc.path)
		if tc.err {
			if err == nil {
				t.Errorf("%s: no error", tc.path)
			}
			continue
		}
		if !ok || err != nil || got != tc.want {
			t.Errorf("%s: %+v %t %v, want %+v", tc.path, got, ok, err, tc.want)
		}
	}
}

func TestNegotiate(t *testing.T) {
	for accept, want := range map[string]string{
		"": "", "*/*": "",
		"application/vnd.kubernetes.protobuf,application/json":                                                                                                 "",
		"application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json":                                      "Table v1",
		"application/json;as=Table;v=v1beta1;g=meta.k8s.io":                                                                                                    "Table v1beta1",
		"application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1": "PartialObjectMetadata ",
		"application/vnd.kubernetes.protobuf":                                                                                                                  "error",
		"application/json;as=Table;v=v2;g=meta.k8s.io":                                                                                                         "error",
	} {
		r := httptest.NewRequest("GET", "/api/v1/pods", nil)
		r.Header.Set("Accept", accept)
		e, err := negotiate(r)
		got := e.As
		if e.As == "Table" || e.As == "PartialObjectMetadata" {
			got += " " + e.TableVersion
		}
		if err != nil {
			got = "error"
		}
		if got != want {
			t.Errorf("Accept %q: %q, want %q", accept, got, want)
		}
	}
}
