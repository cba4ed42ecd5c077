package kubeapi

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/kubeapi/discovery"
	"github.com/multicache/multicache/pkg/storage"
)

// TestClusterObject: a cluster of clusters.multicache.io encodes, in a list and alone, with its
// kind, its cluster annotation and every field of its status as its JSON names them; its
// Table row shows them; a copy shares nothing with it.
func TestClusterObject(t *testing.T) {
	last := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	c := api.Cluster{Name: "fleet-1", State: "Syncing", Owner: "r2", LastSync: &last, Error: "pods: slow", Restarts: 2, Resources: []api.Resource{
		{Resource: "pods", State: "Syncing", Objects: 5, Error: "slow", Progress: &api.Progress{Loaded: 5, Expected: 20, Listing: true}},
		{Resource: "configmaps", State: "Synced", Objects: 7},
	}}
	a := New(Options{})
	for _, as := range []string{"", "Table"} {
		en, err := a.encoder(context.Background(), storage.Encoding{API: storage.KubernetesAPI, TypeMeta: true, As: as}, discovery.ClustersResource)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if err := en.Append(&buf, storage.Item{Key: aggregate.Key{Cluster: c.Name, Name: c.Name}, Object: newClusterObject(c)}, "p-9"); err != nil {
			t.Fatal(err)
		}
		var got map[string]any
		if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
			t.Fatal(err)
		}
		if as == "Table" {
			var row metav1.TableRow
			if err := json.Unmarshal(buf.Bytes(), &row); err != nil {
				t.Fatal(err)
			}
			want := []any{"fleet-1", "Syncing", "1/2", float64(12), "5/20 (25%)", row.Cells[5], "pods: slow"}
			if !reflect.DeepEqual(row.Cells, want) || row.Cells[5] == "<none>" {
				t.Errorf("row %v, want %v", row.Cells, want)
			}
			continue
		}
		want := map[string]any{
			"apiVersion": "multicache.io/v1", "kind": "Cluster",
			"metadata": map[string]any{"name": "fleet-1", "resourceVersion": "p-9",
				"annotations": map[string]any{api.ClusterAnnotation: "fleet-1"}},
			"status": map[string]any{"state": "Syncing", "owner": "r2", "lastSync": "2026-11-29T10:00:00Z", "error": "pods: slow", "restarts": float64(2),
				"objects": float64(12), "syncedResources": "1/2", "progress": "5/20 (25%)",
				"resources": []any{
					map[string]any{"resource": "pods", "state": "Syncing", "objects": float64(5), "error": "slow", "progress": map[string]any{"loaded": float64(5), "expected": float64(20), "listing": true}},
					map[string]any{"resource": "configmaps", "state": "Synced", "objects": float64(7)},
				}},
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("encoded\n %v\nwant\n %v", got, want)
		}
	}
	o := newClusterObject(c)
	cp := o.DeepCopyObject().(*clusterObject)
	cp.Status.Resources[0].Progress.Loaded, cp.Status.Resources[1].State = 99, "Failed"
	if o.Status.Resources[0].Progress.Loaded != 5 || o.Status.Resources[1].State != "Synced" {
		t.Errorf("the copy shares its resources: %+v", o.Status.Resources)
	}
}
