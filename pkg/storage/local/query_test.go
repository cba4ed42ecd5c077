package local

import (
	"net/url"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/index"
	"github.com/multicache/multicache/pkg/storage"
)

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
		sel := storage.Selection{Namespace: q.Get("namespace"), FieldSelector: q.Get("fieldSelector"), Index: q.Get("index"), Value: q.Get("value")}
		if (sel.Index != "") != q.Has("value") {
			return // the native front's to refuse
		}
		query, err := Query(agg, sel)
		if err != nil {
			return
		}
		if validNames(q["cluster"]) != nil {
			return
		}
		query.Clusters = q["cluster"]
		if ls := q.Get("labelSelector"); ls != "" {
			sel, err := labels.Parse(ls)
			if err != nil {
				return
			}
			query.Labels = sel
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

// TestPathFieldsKeepTheirMeaning: a field selector on a path keeps the path's meaning even when
// a custom index has the path's name, for objects and for their attributes.
func TestPathFieldsKeepTheirMeaning(t *testing.T) {
	agg, _, _ := aggregate.New(aggregate.Options{Resource: "pods"})
	if err := agg.AddIndex(aggregate.IndexSpec{Name: "status.phase", Func: func(any) ([]string, error) { return []string{"indexed"}, nil }}); err != nil {
		t.Fatal(err)
	}
	q, err := Query(agg, storage.Selection{FieldSelector: "status.phase=Running"})
	if err != nil {
		t.Fatal(err)
	}
	if q.Index != "" || len(q.Fields) != 1 {
		t.Fatalf("status.phase routed through the index of that name: %+v", q)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "a"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	if !agg.Matches(q, "c1", pod) || !agg.Matches(q, "c1", agg.AttributesOf("c1", pod, PathFields)) {
		t.Error("a Running pod does not match status.phase=Running (as an object, or as attributes)")
	}
	if _, err := Query(agg, storage.Selection{Index: aggregate.IndexClusterNamespace, Value: "c1"}); err == nil {
		t.Error("cluster-namespace index with a value that is not cluster/namespace accepted")
	}
}
