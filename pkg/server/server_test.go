package server

import (
	"bytes"
	"context"
	"encoding/json"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	"github.com/multicache/multicache/internal/fakeapi"
	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/pkg/index"
)

func TestEncodeAddsTypeAndRedactsSecrets(t *testing.T) {
	s := &Server{}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}, Data: map[string][]byte{"password": []byte("hunter2")}, StringData: map[string]string{"k": "v"}}
	b, err := encodeObject(s, secret, clusterset.ResourceStatus{Version: "v1", Kind: "Secret"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "aHVudGVyMg") || strings.Contains(string(b), `"k":"v"`) || !strings.HasPrefix(string(b), `{"kind":"Secret","apiVersion":"v1",`) {
		t.Errorf("encoded secret: %s", b)
	}
	if secret.Data == nil {
		t.Error("encode modified the cached object")
	}
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": "s"}, "data": map[string]any{"p": "aHVudGVyMg=="}}}
	b, _ = encodeObject(s, u, clusterset.ResourceStatus{})
	if strings.Contains(string(b), "aHVudGVyMg") || u.Object["data"] == nil {
		t.Errorf("unstructured secret: %s", b)
	}
	s.opts.AllowSecretData = true
	b, _ = encodeObject(s, secret, clusterset.ResourceStatus{Version: "v1", Kind: "Secret"})
	if !strings.Contains(string(b), "aHVudGVyMg") {
		t.Errorf("allowData: %s", b)
	}
	b, _ = encodeObject(s, &appsDeployment, clusterset.ResourceStatus{Group: "apps", Version: "v1", Kind: "Deployment"})
	if !strings.HasPrefix(string(b), `{"kind":"Deployment","apiVersion":"apps/v1",`) {
		t.Errorf("group apiVersion: %s", b)
	}
}

var appsDeployment = corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "d"}}

// FuzzParseFilter: no query string panics the parser, and every query it accepts matches an
// object (aggregate.Matches) exactly when an independent evaluation of the same parameters does
// (cluster, namespace, label selector, index and field selector, each checked on its own).
func FuzzParseFilter(f *testing.F) {
	agg, _, _ := aggregate.New(aggregate.Options{Resource: "pods"})
	for name, fn := range map[string]cache.IndexFunc{index.NodeName: index.ByNodeName, index.Image: index.ByImage} {
		if err := agg.AddIndex(aggregate.IndexSpec{Name: name, Func: fn}); err != nil {
			f.Fatal(err)
		}
	}
	for _, q := range []string{"labelSelector=app%3Dweb", "fieldSelector=spec.nodeName%3Dn1,metadata.name!%3Dx", "index=image&value=nginx",
		"cluster=fleet-1&namespace=a", "fieldSelector=image%3Dx", "labelSelector=a+in+(b", "cluster=fleet-2", "index=cluster&value=fleet-1",
		"index=cluster-namespace&value=fleet-1/a", "fieldSelector=status.phase%3DRunning,metadata.namespace%3Db", "labelSelector=app!%3Dweb"} {
		f.Add(q)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "a", Labels: map[string]string{"app": "web"}},
		Spec:   corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "c", Image: "nginx"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	values := map[string]string{"metadata.name": "p", "metadata.namespace": "a", "spec.nodeName": "n1", "status.phase": "Running",
		index.NodeName: "n1", index.Image: "nginx", aggregate.IndexCluster: "fleet-1", aggregate.IndexClusterNamespace: "fleet-1/a", aggregate.IndexNamespace: "a"}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		query, err := parseQuery(agg, q)
		if err != nil {
			return
		}
		want := true
		if cs := q["cluster"]; len(cs) > 0 && !slices.Contains(cs, "fleet-1") {
			want = false
		}
		if ns := q.Get("namespace"); ns != "" && ns != "a" {
			want = false
		}
		if ls := q.Get("labelSelector"); ls != "" {
			sel, _ := labels.Parse(ls)
			want = want && sel.Matches(labels.Set(pod.Labels))
		}
		if ix := q.Get("index"); ix != "" {
			v, known := values[ix]
			want = want && known && v == q.Get("value")
		}
		if fs := q.Get("fieldSelector"); fs != "" {
			sel, _ := fields.ParseSelector(fs)
			want = want && sel.Matches(fields.Set(values))
		}
		if got := agg.Matches(query, "fleet-1", pod); got != want {
			t.Fatalf("query %q: filter says %v, independent evaluation %v", raw, got, want)
		}
	})
}

// TestListBytesMatchAPI: the hand-written fast path of list pages (pooled, parallel encoding)
// produces exactly the bytes encoding/json gives for the api types, as do the other answers.
func TestListBytesMatchAPI(t *testing.T) {
	f := fakeapi.New(t)
	f.SetPods(benchPods("c1", 40))
	reg, err := clusterset.New(clusterset.Options{Source: clusterset.Static{{Name: "c1", Config: f.Config(), Fingerprint: "1"}},
		Resources: []clusterset.ResourceSpec{{Name: "pods"}}, ProbeInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	runRegistry(t, reg.Start)
	if missing := reg.WaitForSync(context.Background(), 30*time.Second); missing != nil {
		t.Fatal(missing)
	}
	h := s.Handler()
	roundTrip := func(path string, v any) {
		t.Helper()
		code, body := get(t, h, path, "")
		if code != 200 {
			t.Fatalf("%s: %d %s", path, code, body)
		}
		if err := json.Unmarshal([]byte(body), v); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		want, _ := json.Marshal(v)
		if string(want)+"\n" != body {
			t.Errorf("%s: answer differs from encoding/json of the api type:\n got  %s\n want %s", path, body, want)
		}
	}
	var page api.List
	roundTrip("/multicache/v1/resources/pods?limit=30", &page) // 30 items: the parallel encoder
	if len(page.Items) != 30 || page.Continue == "" {
		t.Fatalf("first page: %d items, continue %q", len(page.Items), page.Continue)
	}
	roundTrip("/multicache/v1/resources/pods?limit=30&continue="+page.Continue, &api.List{})
	roundTrip("/multicache/v1/resources/pods/c1/ns-1/pod-1", &api.Item{})
	roundTrip("/multicache/v1/clusters", &api.Clusters{})
}

// encodeObject is obj as appendEncoded writes it.
func encodeObject(s *Server, obj any, rs clusterset.ResourceStatus) ([]byte, error) {
	var buf bytes.Buffer
	err := s.appendEncoded(&buf, obj, rs)
	return buf.Bytes(), err
}

// TestPathFieldsKeepTheirMeaning: a field selector on a path keeps the path's meaning even when
// a custom index has the path's name, for objects and for their attributes.
func TestPathFieldsKeepTheirMeaning(t *testing.T) {
	agg, _, _ := aggregate.New(aggregate.Options{Resource: "pods"})
	if err := agg.AddIndex(aggregate.IndexSpec{Name: "status.phase", Func: func(any) ([]string, error) { return []string{"indexed"}, nil }}); err != nil {
		t.Fatal(err)
	}
	q, err := parseQuery(agg, url.Values{"fieldSelector": {"status.phase=Running"}})
	if err != nil {
		t.Fatal(err)
	}
	if q.Index != "" || len(q.Fields) != 1 {
		t.Fatalf("status.phase routed through the index of that name: %+v", q)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "a"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	if !agg.Matches(q, "c1", pod) || !agg.Matches(q, "c1", agg.AttributesOf("c1", pod, pathFields)) {
		t.Error("a Running pod does not match status.phase=Running (as an object, or as attributes)")
	}
	if _, err := parseQuery(agg, url.Values{"index": {aggregate.IndexClusterNamespace}, "value": {"c1"}}); err == nil {
		t.Error("cluster-namespace index with a value that is not cluster/namespace accepted")
	}
}
