package fanout

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/multicache/multicache/pkg/storage"
)

// TestStatusKeepsEachPartsAskedClusters: every replica also reports a cluster it was not asked
// for (it moved: its owner reports it). The merged clusters, definitions and resources name
// each cluster once, from its owner, and nothing else.
func TestStatusKeepsEachPartsAskedClusters(t *testing.T) {
	r, parts, fl, _ := testFleet(t)
	parts["me"].extra, parts["p2"].extra, parts["p3"].extra = "c5", "c0", "c1"
	ownerOf := map[string]string{}
	var all []string
	for _, o := range fl.owners {
		ownerOf[o.Cluster] = o.Holder
		all = append(all, o.Cluster)
	}
	ctx := context.Background()

	clusters, err := r.Clusters(ctx, storage.ClusterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range clusters {
		names = append(names, c.Name)
		if c.Owner != ownerOf[c.Name] {
			t.Errorf("cluster %s shown from %q, its owner is %q", c.Name, c.Owner, ownerOf[c.Name])
		}
	}
	if !slices.Equal(names, all) {
		t.Errorf("clusters: %v, want %v", names, all)
	}

	defs, err := r.Definitions(ctx, storage.ClusterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(defs) != 1 || !slices.Equal(defs[0].Clusters, all) {
		t.Errorf("definitions: %s, want one served by %v", fmt.Sprint(defs), all)
	}

	statuses, err := r.Resources(ctx, storage.ClusterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	names = names[:0]
	for _, cs := range statuses {
		names = append(names, cs.Name)
	}
	if !slices.Equal(names, all) {
		t.Errorf("resources: %v, want %v", names, all)
	}

	// Named clusters: only those, each once.
	named := []string{"c7", "c1", "c4"}
	clusters, err = r.Clusters(ctx, storage.ClusterOptions{Clusters: named})
	if err != nil {
		t.Fatal(err)
	}
	names = names[:0]
	for _, c := range clusters {
		names = append(names, c.Name)
	}
	if want := []string{"c1", "c4", "c7"}; !slices.Equal(names, want) {
		t.Errorf("clusters named %v: %v, want %v", named, names, want)
	}
}
