package aggregate

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// TestSelectAndMatchesAgree: for every query, an object is in Select's answer exactly when
// Matches says it matches, and so do its Attributes (what a watch keeps of a replaced state).
func TestSelectAndMatchesAgree(t *testing.T) {
	a := newAgg(t)
	app := func(obj any) ([]string, error) { return []string{obj.(*corev1.ConfigMap).Labels["app"]}, nil }
	if err := a.AddIndex(IndexSpec{Name: "app", Func: app, Clusters: []string{"c1"}}); err != nil {
		t.Fatal(err)
	}
	var objs []Item
	for _, c := range []string{"c1", "c2"} {
		s := &source{}
		for i, ns := range []string{"a", "b", ""} {
			for j := range 2 {
				o := cm(ns, fmt.Sprintf("o%d%d", i, j), "1", map[string]string{"app": fmt.Sprint("web", j), "tier": "x"})
				s.items = append(s.items, *o)
				objs = append(objs, Item{Cluster: c, Object: o})
			}
		}
		inf, _ := startInformer(t, s)
		if err := a.join(c, inf); err != nil {
			t.Fatal(err)
		}
	}
	a.WaitForSync(context.Background(), 5*time.Second)
	appValues := func(obj any) []string { v, _ := app(obj); return v }
	for _, q := range []Query{
		{},
		{Clusters: []string{"c2"}},
		{Clusters: []string{"c2", "nowhere", "c1", "c2"}}, // unsorted, unknown, twice: each once
		{Clusters: []string{"c1", "c1"}},
		{Clusters: []string{"nowhere"}},
		{Namespace: "a"},
		{Index: IndexCluster, Value: "c1", Namespace: "b"},
		{Index: IndexClusterNamespace, Value: "c2/a"},
		{Index: IndexNamespace, Value: "b"},
		{Index: "app", Value: "web1"},
		{Index: "app", Value: "web1", Namespace: "a"},
		{Labels: labels.SelectorFromSet(labels.Set{"app": "web0"})},
		{Fields: []FieldTerm{{Field: "app", Value: "web1"}}},                  // the scoped index, as a field term
		{Fields: []FieldTerm{{Field: "app", Value: "web1", Not: true}}},       // …negated
		{Fields: []FieldTerm{{Field: "x", Value: "web1", Values: appValues}}}, // a term with its own reader
		{Index: IndexNamespace, Value: "a", Fields: []FieldTerm{{Field: "app", Value: "web0"}}},
	} {
		res, err := a.Select(q)
		if err != nil {
			t.Fatalf("%+v: %v", q, err)
		}
		in := map[string]bool{}
		for i, it := range res.Items {
			if in[it.Key().String()] {
				t.Errorf("%+v: %s answered twice", q, it.Key())
			}
			if i > 0 && res.Items[i-1].Cluster > it.Cluster {
				t.Errorf("%+v: %s after %s: not in cluster order", q, it.Key(), res.Items[i-1].Key())
			}
			in[it.Key().String()] = true
		}
		for _, it := range objs {
			k := it.Key().String()
			if got := a.Matches(q, it.Cluster, it.Object); got != in[k] {
				t.Errorf("%+v: %s: Matches %v, Select %v", q, k, got, in[k])
			}
			at := a.AttributesOf(it.Cluster, it.Object, map[string]func(any) []string{"x": appValues})
			if got := a.Matches(q, it.Cluster, at); got != in[k] {
				t.Errorf("%+v: %s: Matches on its Attributes %v, Select %v", q, k, got, in[k])
			}
		}
	}
	if _, err := a.Select(Query{Index: IndexClusterNamespace, Value: "c1"}); err == nil {
		t.Error("cluster-namespace index with a value that is not cluster/namespace: Select answered")
	}
	if a.Matches(Query{Index: IndexClusterNamespace, Value: "c1"}, "c1", objs[0].Object) {
		t.Error("cluster-namespace index with a value that is not cluster/namespace: Matches true")
	}
}
