package local

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/multicache/multicache/pkg/storage"
)

// TestAWatchKeepsNoStatus: a watch keeps its selection for its life, and a selection's info
// points into the whole fleet's status as the watch's start read it; once the watch is open
// the info is gone, and the watch still starts with each cluster's freshness and objects.
func TestAWatchKeepsNoStatus(t *testing.T) {
	s := fakeFleetStorage(t, map[string][]corev1.Pod{"c0": summaryPods("c0"), "c1": summaryPods("c1")})
	for _, initial := range []bool{false, true} {
		ctx, cancel := context.WithCancel(context.Background())
		wt, err := s.Watch(ctx, storage.WatchOptions{Selection: storage.Selection{Resource: "pods"}, Initial: initial})
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		w, ok := wt.(*watch)
		switch {
		case !ok:
			t.Fatalf("initial %v: a watch of type %T", initial, wt)
		case w.sel.info != nil:
			t.Errorf("initial %v: the open watch keeps the info of %d clusters", initial, len(w.sel.info))
		case len(w.fresh) != 2:
			t.Errorf("initial %v: freshness %+v, want c0's and c1's", initial, w.fresh)
		}
		cancel()
	}
}
