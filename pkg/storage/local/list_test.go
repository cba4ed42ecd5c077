package local

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/auth"
	"github.com/multicache/multicache/pkg/storage"
	"github.com/multicache/multicache/pkg/watchcache"
)

// TestKeyOrderPagesWalkTheFleet: unsorted pages (key order: cluster, namespace, name), which
// read a cluster one namespace at a time when they can, walked at several page sizes over
// clusters of several namespaces (one with a single namespace, one with namespaces that sort
// before and after the others'), with and without counts and a label selector. The pages
// joined are every selected key once, in order; each page's total and before are counted here
// from the Pods the API servers list.
func TestKeyOrderPagesWalkTheFleet(t *testing.T) {
	sizes := map[string]map[string]int{
		"c0": {"a": 3, "b": 1, "kube-system": 7, "m": 12},
		"c1": {"0-first": 2, "m": 5, "zz": 4},
		"c2": {"only": 9},
	}
	pods := map[string][]corev1.Pod{}
	var all []aggregate.Key
	web := map[aggregate.Key]bool{}
	for c, namespaces := range sizes {
		for ns, n := range namespaces {
			for i := range n {
				name := fmt.Sprintf("p-%02d", i)
				p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(c + ns + name), ResourceVersion: "1",
					Labels: map[string]string{"tier": []string{"web", "db"}[i%2]}}}
				pods[c] = append(pods[c], p)
				key := aggregate.Key{Cluster: c, Namespace: ns, Name: name}
				all = append(all, key)
				web[key] = i%2 == 0
			}
		}
	}
	slices.SortFunc(all, watchcache.CompareKeys)
	s := fakeFleetStorage(t, pods)
	ctx := auth.WithAccess(context.Background(), auth.Everything{})

	// The pages below read by namespace where namespaceWalk says so: check that it does for
	// the clusters of several namespaces, and not where it must not.
	for _, w := range []struct {
		labels  string
		cluster string
		limit   int
		count   bool
		walks   bool
	}{
		{"", "c0", 500, true, true},
		{"", "c1", 1, true, true},
		{"", "c2", 500, true, false},            // one namespace
		{"", "c0", math.MaxInt32, false, false}, // no limit: read whole
		{"tier=web", "c0", 500, false, true},    // filtered, not counted
		{"tier=web", "c0", 500, true, false},    // filtered and counted
	} {
		sel, err := s.selectFor(ctx, s.view(ctx), storage.Selection{Resource: "pods", LabelSelector: w.labels})
		if err != nil {
			t.Fatal(err)
		}
		ns := namespaceWalk(sel, w.cluster, w.limit, w.count)
		if want := slices.Sorted(maps.Keys(sizes[w.cluster])); w.walks && !slices.Equal(ns, want) || !w.walks && ns != nil {
			t.Errorf("namespaceWalk(%q, %s, limit %d, count %v) = %q, walks %v", w.labels, w.cluster, w.limit, w.count, ns, w.walks)
		}
	}

	for _, tc := range []struct {
		name   string
		labels string
		count  bool
	}{
		{"every pod, counted", "", true},
		{"every pod", "", false},
		{"tier=web, counted", "tier=web", true},
		{"tier=web", "tier=web", false},
	} {
		var want []aggregate.Key
		for _, k := range all {
			if tc.labels == "" || web[k] {
				want = append(want, k)
			}
		}
		for _, limit := range []int64{1, 2, 3, 7, 500} {
			var got []aggregate.Key
			cont := ""
			for pages := 0; ; pages++ {
				if pages > len(all)+1 {
					t.Fatalf("%s, limit %d: the pages do not end", tc.name, limit)
				}
				l, err := s.List(ctx, storage.ListOptions{Selection: storage.Selection{Resource: "pods", LabelSelector: tc.labels}, Limit: limit, Continue: cont, Count: tc.count})
				if err != nil {
					t.Fatalf("%s, limit %d, page %d: %v", tc.name, limit, pages, err)
				}
				if tc.count {
					if l.Count == nil || l.Count.Total != int64(len(want)) || l.Count.Before != int64(len(got)) {
						t.Errorf("%s, limit %d, page %d: count %+v, want total %d before %d", tc.name, limit, pages, l.Count, len(want), len(got))
					}
				}
				if int64(len(l.Items)) > limit {
					t.Fatalf("%s, limit %d: a page of %d", tc.name, limit, len(l.Items))
				}
				for _, it := range l.Items {
					got = append(got, it.Key)
				}
				if l.Continue == "" {
					break
				}
				cont = l.Continue
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s, limit %d: the pages give\n %v\nwant\n %v", tc.name, limit, got, want)
			}
			if !tc.count {
				continue
			}
			// A count alone, after the first page: what follows it and what precedes it.
			first, err := s.List(ctx, storage.ListOptions{Selection: storage.Selection{Resource: "pods", LabelSelector: tc.labels}, Limit: limit})
			if err != nil || first.Continue == "" && int64(len(want)) > limit {
				t.Fatalf("%s, limit %d: first page: %v", tc.name, limit, err)
			}
			if first.Continue == "" {
				continue
			}
			l, err := s.List(ctx, storage.ListOptions{Selection: storage.Selection{Resource: "pods", LabelSelector: tc.labels}, Limit: limit, Continue: first.Continue, CountOnly: true})
			if err != nil || l.Count == nil || l.Count.Total != int64(len(want)) || l.Count.Before != limit || len(l.Items) != 0 {
				t.Errorf("%s, limit %d: count only after the first page: %+v %v, want total %d before %d", tc.name, limit, l, err, len(want), limit)
			}
		}
	}
}

// TestClustersNamedTwiceOrOutOfOrder: a read that names a cluster twice, or its clusters out of
// order, reads each cluster once, in cluster order: a get's objects come once each, sorted by
// cluster, and a cluster the fleet does not have is named once in the freshness.
func TestClustersNamedTwiceOrOutOfOrder(t *testing.T) {
	s := fakeFleetStorage(t, map[string][]corev1.Pod{"c0": summaryPods("c0"), "c1": summaryPods("c1"), "c2": summaryPods("c2")})
	ctx := context.Background() // auth off: every cluster
	named := []string{"c2", "c0", "c2"}
	l, err := s.Get(ctx, storage.GetOptions{Selection: storage.Selection{Resource: "pods", Namespace: "a", Clusters: named}, Name: "web-1"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, it := range l.Items {
		got = append(got, it.Key.String())
	}
	if want := []string{"c0|a/web-1", "c2|a/web-1"}; !slices.Equal(got, want) {
		t.Errorf("get web-1 in %v: %v, want %v", named, got, want)
	}
	list, err := s.List(ctx, storage.ListOptions{Selection: storage.Selection{Resource: "pods", Clusters: []string{"zz", "c1", "zz"}}})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range list.Freshness {
		names = append(names, f.Name)
	}
	if want := []string{"c1", "zz"}; !slices.Equal(names, want) {
		t.Errorf("freshness of a list of zz, c1, zz names %v, want %v", names, want)
	}
	if n := len(summaryPods("c1")); len(list.Items) != n {
		t.Errorf("the list of zz, c1, zz: %d items, want c1's %d", len(list.Items), n)
	}
}
