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
	// A watch under the scope reads the status again: a watch outlives its request.
	ctx := storage.WithReadScope(context.Background())
	request(ctx)
	reads.Store(0)
	for range 2 { // opened, not run: a watch registers nothing until it runs
		if _, err := s.Watch(ctx, storage.WatchOptions{Selection: part("c0")}); err != nil {
			t.Fatal(err)
		}
	}
	if n := reads.Load(); n != 2 {
		t.Errorf("two watches under a request's scope read the status %d times, want 2 (each its own)", n)
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
	// Named: those named, each one the caller may read, else 403; a cluster selector narrows.
	may := auth.WithAccess(context.Background(), onlyClusters{"c1": true, "c3": true})
	for _, tc := range []struct {
		named    []string
		selector string
		want     []string
		code     int
	}{
		{[]string{"c3", "c1"}, "", []string{"c1", "c3"}, 0},
		{[]string{"c1"}, "", []string{"c1"}, 0},
		{[]string{"c1", "c3"}, "multicache.io/cluster=c3", []string{"c3"}, 0},
		{nil, "multicache.io/cluster in (c0,c3)", []string{"c3"}, 0},
		{[]string{"c1", "c0"}, "", nil, 403},
	} {
		cl, err := s.Clusters(may, storage.ClusterOptions{Clusters: tc.named, LabelSelector: tc.selector})
		if tc.code != 0 {
			if storage.Code(err) != tc.code {
				t.Errorf("named %v: %v, want %d", tc.named, err, tc.code)
			}
			continue
		}
		if err != nil {
			t.Fatalf("named %v, selector %q: %v", tc.named, tc.selector, err)
		}
		got := []string{}
		for _, c := range cl {
			got = append(got, c.Name)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("named %v, selector %q: listed %v, want %v", tc.named, tc.selector, got, tc.want)
		}
	}
}

// TestCatchUpWaitReadsTheStatusAgain: a read that waits for the watch cache to take a synced
// cluster's list looks at the status again as it waits, not at its read scope's: what the
// scope holds is what it waits to change.
func TestCatchUpWaitReadsTheStatusAgain(t *testing.T) {
	s := fakeFleetStorage(t, map[string][]corev1.Pod{"c0": summaryPods("c0")})
	status := func(state clusterset.State) func() []clusterset.ClusterStatus {
		return func() []clusterset.ClusterStatus {
			return []clusterset.ClusterStatus{{Name: "cx", Resources: []clusterset.ResourceStatus{{Resource: "pods", State: state}}}}
		}
	}
	ctx := storage.WithReadScope(context.Background())
	s.readStatus = status(clusterset.Synced) // synced, and not in the watch cache: catching up
	info := s.view(ctx).info("pods")
	s.readStatus = status(clusterset.NotServed) // now: nothing to wait for
	if out := s.unreadyAwait(ctx, info, "pods", []string{"cx"}); len(out) != 0 {
		t.Errorf("waited on the scope's status: %v, want nothing unready once the status says so", out)
	}
}
