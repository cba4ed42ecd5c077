package discovery

import (
	"slices"
	"testing"

	"github.com/multicache/multicache/pkg/clusterset"
)

// TestCatalogSameNameInTwoGroups: a namespaced and a cluster-scoped resource of the same plural
// in different groups both resolve, each with its own scope, and discovery lists both.
func TestCatalogSameNameInTwoGroups(t *testing.T) {
	rs := func(name, group string, namespaced bool) clusterset.ResourceStatus {
		return clusterset.ResourceStatus{Resource: name, Group: group, Version: "v1", Kind: "Widget", Plural: "widgets",
			Namespaced: namespaced, State: clusterset.Synced}
	}
	cat := build([]clusterset.ClusterStatus{
		{Name: "b", Resources: []clusterset.ResourceStatus{rs("widgets.b.example", "b.example", false)}},
		{Name: "a", Resources: []clusterset.ResourceStatus{rs("widgets.a.example", "a.example", true), rs("widgets.b.example", "b.example", false)}},
	}, "")
	for group, namespaced := range map[string]bool{"a.example": true, "b.example": false} {
		kr := cat.Find(group, "v1", "widgets")
		if kr == nil || kr.API.Namespaced != namespaced || kr.GVK.Group != group {
			t.Fatalf("find %s/v1/widgets: %+v", group, kr)
		}
		if res := cat.ResourcesOf(group, "v1"); len(res) != 1 || res[0].Name != "widgets" || res[0].Namespaced != namespaced {
			t.Errorf("discovery of %s/v1: %+v", group, res)
		}
	}
	if kr := cat.Find("b.example", "v1", "widgets"); !slices.Equal(kr.Clusters, []string{"a", "b"}) {
		t.Errorf("b.example widgets: clusters %v, want [a b]", kr.Clusters)
	}
	if cat.Find("c.example", "v1", "widgets") != nil {
		t.Error("a group no cluster serves resolved")
	}
	// Clusters serving different versions: the first cluster's (by name) is the resource's;
	// both resolve.
	v2 := rs("widgets.a.example", "a.example", true)
	v2.Version = "v2"
	cat = build([]clusterset.ClusterStatus{
		{Name: "b", Resources: []clusterset.ResourceStatus{rs("widgets.a.example", "a.example", true)}},
		{Name: "a", Resources: []clusterset.ResourceStatus{v2}},
	}, "")
	if kr := cat.Find("a.example", "v1", "widgets"); kr == nil || kr.GVK.Version != "v2" || cat.Find("a.example", "v2", "widgets") != kr {
		t.Errorf("versions v2 in a, v1 in b: %+v", kr)
	}
}
