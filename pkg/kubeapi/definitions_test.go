package kubeapi

import (
	"slices"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/multicache/multicache/pkg/storage"
)

// TestCRDDiff: what a watch sends between two sets.
func TestCRDDiff(t *testing.T) {
	def := func(name, rv string) *apiextensionsv1.CustomResourceDefinition {
		return &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: rv}}
	}
	before := []storage.Definition{{Def: def("a", "1"), From: "x", Clusters: []string{"x"}}, {Def: def("b", "1"), From: "x", Clusters: []string{"x"}},
		{Def: def("c", "1"), From: "x", Clusters: []string{"x"}}}
	after := []storage.Definition{{Def: def("a", "1"), From: "x", Clusters: []string{"x", "y"}}, {Def: def("c", "1"), From: "x", Clusters: []string{"x"}},
		{Def: def("d", "1"), From: "y", Clusters: []string{"y"}}}
	var got []string
	for _, ev := range crdDiff(before, after) {
		got = append(got, ev.typ+" "+ev.entry.Def.Name)
	}
	if want := []string{"MODIFIED a", "ADDED d", "DELETED b"}; !slices.Equal(got, want) {
		t.Errorf("diff %v, want %v", got, want)
	}
	if crdVersion(before) == crdVersion(after) || crdVersion(before) != crdVersion(slices.Clone(before)) {
		t.Error("crdVersion: equal sets must hash equal, and different ones differ")
	}
}
