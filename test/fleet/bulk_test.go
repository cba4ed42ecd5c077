package fleet_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/multicache/multicache/test/fleet"
)

// TestBulkSeed checks that objects written straight into etcd are served by the API server
// like created ones: listed, fetched, selected by field, with the template's defaults and
// managedFields and their own name, UID, labels and node.
func TestBulkSeed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	f := fleet.StartT(t, fleet.Options{Clusters: 2, APIServerArgs: []string{"--watch-cache=false"}})
	l, err := fleet.NewLoader(f)
	if err != nil {
		t.Fatal(err)
	}
	spec := fleet.BulkSpec{Namespaces: 3, PodsPerNamespace: 40, ConfigMapsPerNamespace: 15, Nodes: 8}
	n, err := l.BulkSeed(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if n != 3*55 {
		t.Fatalf("BulkSeed reports %d objects per cluster, want %d", n, 3*55)
	}
	for _, name := range f.Names() {
		cs, _ := f.Clientset(name)
		pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cms, err := cs.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{LabelSelector: "team"})
		if err != nil {
			t.Fatal(err)
		}
		if len(pods.Items) != 120 || len(cms.Items) != 45 {
			t.Fatalf("cluster %s: %d pods and %d configmaps, want 120 and 45", name, len(pods.Items), len(cms.Items))
		}
		uids := map[string]bool{}
		for _, p := range pods.Items {
			uids[string(p.UID)] = true
		}
		if len(uids) != 120 {
			t.Errorf("cluster %s: %d distinct UIDs among 120 pods", name, len(uids))
		}
		p, err := cs.CoreV1().Pods("load-2").Get(ctx, "pod-7", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := fleet.PodFor("load-2", 7, spec.Nodes)
		if p.Spec.NodeName != want.Spec.NodeName || p.Labels["app"] != want.Labels["app"] || len(p.Spec.Containers) != 3 ||
			p.Spec.Containers[2].Image != want.Spec.Containers[2].Image || p.Spec.Containers[0].Env[1].Value != "7" {
			t.Errorf("cluster %s: bulk pod differs from PodFor: %+v", name, p)
		}
		if len(p.ManagedFields) == 0 || p.Spec.Containers[0].TerminationMessagePath == "" || p.ResourceVersion == "" {
			t.Errorf("cluster %s: bulk pod lacks what the API server adds: managedFields %d, terminationMessagePath %q, rv %q",
				name, len(p.ManagedFields), p.Spec.Containers[0].TerminationMessagePath, p.ResourceVersion)
		}
		onNode, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", fleet.NodeName(3)).String()})
		if err != nil {
			t.Fatal(err)
		}
		if got := len(onNode.Items); got != 120/8 {
			t.Errorf("cluster %s: %d pods on %s, want %d", name, got, fleet.NodeName(3), 120/8)
		}
		if _, err := cs.CoreV1().ConfigMaps("load-1").Get(ctx, fmt.Sprintf("cm-%d", 14), metav1.GetOptions{}); err != nil {
			t.Errorf("cluster %s: %v", name, err)
		}
	}
}
