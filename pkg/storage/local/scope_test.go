package local

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/multicache/multicache/pkg/auth"
	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/pkg/storage"
)

// TestOneStatusReadPerScope: the reads of one request, under its read scope, read the
// Registry's status once, as a fan-out's first page reads this replica's part (the page and the
// count of its other clusters at once, then a second round), with a get, a summary and the
// catalog's status reads beside them. Without a scope, each read reads it.
func TestOneStatusReadPerScope(t *testing.T) {
	s := fakeFleetStorage(t, map[string][]corev1.Pod{"c0": summaryPods("c0"), "c1": summaryPods("c1")})
	var reads atomic.Int32
	read := s.readStatus
	s.readStatus = func() []clusterset.ClusterStatus {
		reads.Add(1)
		return read()
	}
	part := func(c string) storage.Selection { return storage.Selection{Resource: "pods", Part: []string{c}} }
	const calls = 7
	request := func(ctx context.Context) {
		t.Helper()
		var wg sync.WaitGroup
		for _, o := range []storage.ListOptions{{Selection: part("c0"), Limit: 2}, {Selection: part("c1"), CountOnly: true}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := s.List(ctx, o); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		l, err := s.List(ctx, storage.ListOptions{Selection: part("c1"), Limit: 2})
		if err != nil || len(l.Items) != 2 {
			t.Fatalf("second round: %v, %+v", err, l)
		}
		if g, err := s.Get(ctx, storage.GetOptions{Selection: storage.Selection{Resource: "pods", Namespace: "a", Part: []string{"c0"}}, Name: "web-1"}); err != nil || len(g.Items) != 1 {
			t.Fatalf("get: %v, %+v", err, g)
		}
		if sum, err := s.Summarize(ctx, storage.SummaryOptions{Selection: storage.Selection{Resource: "pods"}, By: []string{"cluster"}}); err != nil || sum.Total != 8 {
			t.Fatalf("summary: %v, %+v", err, sum)
		}
		if cs, err := s.Resources(ctx, storage.ClusterOptions{}); err != nil || len(cs) != 2 {
			t.Fatalf("resources: %v, %+v", err, cs)
		}
		if cs, err := s.Clusters(ctx, storage.ClusterOptions{}); err != nil || len(cs) != 2 {
			t.Fatalf("clusters: %v, %+v", err, cs)
		}
	}
	request(storage.WithReadScope(context.Background()))
	if n := reads.Load(); n != 1 {
		t.Errorf("one request under a read scope read the status %d times, want 1", n)
	}
	reads.Store(0)
	request(storage.WithReadScope(context.Background()))
	if n := reads.Load(); n != 1 {
		t.Errorf("a second request under its own scope read the status %d times, want 1 (its own)", n)
	}
	reads.Store(0)
	request(context.Background())
	if n := reads.Load(); n != calls {
		t.Errorf("without a scope the reads read the status %d times, want %d (each its own)", n, calls)
	}
}

// TestClustersShowWhatTheCallerMayRead: the clusters' status lists, of the clusters asked for,
// those the caller may read, in order, each with the objects its aggregate holds.
func TestClustersShowWhatTheCallerMayRead(t *testing.T) {
	pods := map[string][]corev1.Pod{"c0": summaryPods("c0"), "c1": summaryPods("c1"), "c3": summaryPods("c3")}
	s := fakeFleetStorage(t, pods)
	for _, tc := range []struct {
		access onlyClusters
		part   []string
		want   []string
	}{
		{onlyClusters{"c0": true, "c1": true, "c3": true}, nil, []string{"c0", "c1", "c3"}},
		{onlyClusters{"c1": true}, nil, []string{"c1"}},
		{onlyClusters{"c0": true, "c3": true}, nil, []string{"c0", "c3"}},
		{onlyClusters{"c0": true, "c3": true}, []string{"c1", "c3"}, []string{"c3"}},
		{onlyClusters{}, nil, []string{}},
	} {
		cl, err := s.Clusters(auth.WithAccess(context.Background(), tc.access), storage.ClusterOptions{Part: tc.part})
		if err != nil {
			t.Fatal(err)
		}
		got := []string{}
		for _, c := range cl {
			got = append(got, c.Name)
			if len(c.Resources) != 1 || c.Resources[0].Objects != len(pods[c.Name]) {
				t.Errorf("%v: cluster %s: resources %+v, want pods with %d objects", tc.access, c.Name, c.Resources, len(pods[c.Name]))
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("may read %v, part %v: listed %v, want %v", tc.access, tc.part, got, tc.want)
		}
	}
}
