package aggregate

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// sortRef is one object of the test's own record, in a sorted list's order.
type sortRef struct {
	key   Key
	value string
}

// byHandSorted is every object of objects (cluster → namespace/name → value) in the order of
// a sorted list: value (descending with desc), then cluster, namespace and name.
func byHandSorted(objects map[string]map[string]string, desc bool) []sortRef {
	var out []sortRef
	for c, objs := range objects {
		for nn, v := range objs {
			ns, name, _ := strings.Cut(nn, "/")
			out = append(out, sortRef{Key{Cluster: c, Namespace: ns, Name: name}, v})
		}
	}
	slices.SortFunc(out, func(a, b sortRef) int {
		if c := strings.Compare(a.value, b.value); c != 0 {
			if desc {
				return -c
			}
			return c
		}
		if c := strings.Compare(a.key.Cluster, b.key.Cluster); c != 0 {
			return c
		}
		if c := strings.Compare(a.key.Namespace, b.key.Namespace); c != 0 {
			return c
		}
		return strings.Compare(a.key.Name, b.key.Name)
	})
	return out
}

// TestSortIndex: an order asked again becomes a sort index. Once it has had every cluster's
// list, every page of every size, from every cursor, ascending and descending, equals the order
// by hand, with its totals and what comes before it, through adds, changes of value, deletes
// and a cluster that leaves. Many objects share a value, so cursors fall inside runs of equal
// values in every cluster. A filtered list and a first ask are not answered; beyond
// SortIndexes the least recently asked index is evicted and its handler removed.
func TestSortIndex(t *testing.T) {
	a, ms, err := New(Options{Resource: "configmaps", SyncPollInterval: 5 * time.Millisecond, SortIndexes: 2})
	if err != nil {
		t.Fatal(err)
	}
	value := func(obj any) string { return obj.(*corev1.ConfigMap).Labels["rank"] }
	asc := Sorter{Name: "asc rank", Value: value}
	desc := Sorter{Name: "desc rank", Value: value, Desc: true}
	objects := map[string]map[string]string{}
	sources := map[string]*source{}
	for _, c := range []string{"c1", "c2", "c3"} {
		s := &source{}
		objects[c] = map[string]string{}
		for i := range 11 {
			v := fmt.Sprint(i % 4) // runs of equal values
			if i%5 == 0 {
				v = "" // no value sorts first
			}
			o := cm(fmt.Sprint("ns", i%2), fmt.Sprint("o", i), "1", map[string]string{"rank": v})
			s.items = append(s.items, *o)
			objects[c][o.Namespace+"/"+o.Name] = v
		}
		inf, _ := startInformer(t, s)
		if err := ms.Join(c, inf); err != nil {
			t.Fatal(err)
		}
		sources[c] = s
	}
	a.WaitForSync(context.Background(), 5*time.Second)
	all := Query{Clusters: []string{"c1", "c2", "c3"}}
	if _, ok := a.SortedAfter(all, asc, nil, 5); ok {
		t.Fatal("a first ask was answered by an index")
	}
	a.SortedAfter(all, desc, nil, 5) // the first ask of desc
	waitTrue(t, "both orders learned", func() bool {
		a.SortedAfter(all, asc, nil, 5)
		a.SortedAfter(all, desc, nil, 5)
		n := 0
		for _, si := range a.SortIndexes() {
			if si.Clusters == 3 {
				n++
			}
		}
		return n == 2
	})
	tierWeb, _ := labels.Parse("rank=1")
	if _, ok := a.SortedAfter(Query{Clusters: all.Clusters, Labels: tierWeb}, asc, nil, 5); ok {
		t.Error("a filtered list was answered by the index")
	}
	if _, ok := a.SortedAfter(Query{Clusters: all.Clusters, Namespace: "ns0"}, asc, nil, 5); ok {
		t.Error("a list of one namespace was answered by the index")
	}

	// walk pages through the whole list, and checks each against the order by hand.
	walk := func(s Sorter, clusters []string, limit int) error {
		want := byHandSorted(objects, s.Desc)
		want = slices.DeleteFunc(want, func(r sortRef) bool { return !slices.Contains(clusters, r.key.Cluster) })
		var after *SortPosition
		for at := 0; ; {
			pg, ok := a.SortedAfter(Query{Clusters: clusters}, s, after, limit)
			if !ok {
				return fmt.Errorf("%s, pages of %d, at %d: not answered by the index", s.Name, limit, at)
			}
			end := min(at+limit, len(want))
			var got []sortRef
			for _, it := range pg.Items {
				got = append(got, sortRef{it.Key, it.Value})
			}
			if !slices.Equal(got, want[at:end]) {
				return fmt.Errorf("%s, pages of %d, at %d: %v, want %v", s.Name, limit, at, got, want[at:end])
			}
			if pg.Total != int64(len(want)) || pg.Before != int64(at) || pg.More != (end < len(want)) {
				return fmt.Errorf("%s, pages of %d, at %d: total %d, before %d, more %v; want %d, %d, %v", s.Name, limit, at, pg.Total, pg.Before, pg.More, len(want), at, end < len(want))
			}
			if !pg.More {
				return nil
			}
			last := pg.Items[len(pg.Items)-1]
			after = &SortPosition{Value: last.Value, Key: last.Key}
			at = end
		}
	}
	agree := func(what string, clusters ...string) {
		t.Helper()
		for _, s := range []Sorter{asc, desc} {
			for _, limit := range []int{1, 2, 5, 7, 100} {
				var err error
				if !waitUntil(func() bool { err = walk(s, clusters, limit); return err == nil }) {
					t.Fatalf("%s: %v", what, err)
				}
			}
		}
	}
	agree("every page equals the order by hand", "c1", "c2", "c3")
	agree("the pages of two clusters", "c1", "c3")
	s1 := sources["c1"]
	s1.w.Add(cm("ns0", "new", "2", map[string]string{"rank": "2"}))
	s1.w.Modify(cm("ns1", "o1", "3", map[string]string{"rank": "9"}))
	s1.w.Delete(cm("ns0", "o2", "4", map[string]string{"rank": "2"})) // its final state
	objects["c1"]["ns0/new"], objects["c1"]["ns1/o1"] = "2", "9"
	delete(objects["c1"], "ns0/o2")
	agree("after an add, a change of value and a delete", "c1", "c2", "c3")
	ms.Leave("c2")
	delete(objects, "c2")
	agree("after c2 left", "c1", "c3")

	// Two indexes at most: a third order evicts the least recently asked, and removes its
	// handler.
	a.sorts.mu.Lock()
	e, _ := a.sorts.asked.Peek(desc.Name)
	a.sorts.mu.Unlock()
	a.SortedAfter(all, asc, nil, 1) // asc is now the most recently asked
	other := Sorter{Name: "asc name", Value: func(obj any) string { return obj.(*corev1.ConfigMap).Name }}
	a.SortedAfter(all, other, nil, 1)
	a.SortedAfter(all, other, nil, 1)
	var names []string
	for _, si := range a.SortIndexes() {
		names = append(names, si.Name)
	}
	if !slices.Equal(names, []string{"asc rank", "asc name"}) {
		t.Errorf("sort indexes after a third order: %v, want asc rank and asc name", names)
	}
	select {
	case <-e.idx.reg.Done():
	case <-time.After(5 * time.Second):
		t.Error("the evicted index's handler was not removed")
	}
}

// TestSortIndexBounds: an order whose index alone would pass SortIndexBytes is never learned
// (its lists keep reading objects), and a page larger than MaxSortedPage is not answered from
// an index. A cursor that is no item (deleted since) continues where it would sort.
func TestSortIndexBounds(t *testing.T) {
	a, ms, err := New(Options{Resource: "configmaps", SyncPollInterval: 5 * time.Millisecond, SortIndexBytes: 20 * sortEntryBytes})
	if err != nil {
		t.Fatal(err)
	}
	s := &source{}
	for i := range 30 {
		s.items = append(s.items, *cm("ns", fmt.Sprintf("o%02d", i), "1", nil))
	}
	inf, _ := startInformer(t, s)
	if err := ms.Join("c1", inf); err != nil {
		t.Fatal(err)
	}
	a.WaitForSync(context.Background(), 5*time.Second)
	byName := Sorter{Name: "asc name", Value: func(obj any) string { return obj.(*corev1.ConfigMap).Name }}
	q := Query{Clusters: []string{"c1"}}
	for range 4 {
		if _, ok := a.SortedAfter(q, byName, nil, 5); ok {
			t.Fatal("an index larger than SortIndexBytes answered")
		}
	}
	if si := a.SortIndexes(); len(si) != 0 {
		t.Fatalf("an index larger than SortIndexBytes was learned: %+v", si)
	}
	// 10 objects fit: learned; a cursor at the deleted o07 continues at o08.
	ms.Leave("c1")
	s = &source{}
	for i := range 10 {
		if i != 7 {
			s.items = append(s.items, *cm("ns", fmt.Sprintf("o%02d", i), "1", nil))
		}
	}
	inf, _ = startInformer(t, s)
	if err := ms.Join("c1", inf); err != nil {
		t.Fatal(err)
	}
	a.WaitForSync(context.Background(), 5*time.Second)
	var pg SortedPage
	waitTrue(t, "the small index answers", func() bool {
		var ok bool
		pg, ok = a.SortedAfter(q, byName, &SortPosition{Value: "o07", Key: Key{Cluster: "c1", Namespace: "ns", Name: "o07"}}, 5)
		return ok
	})
	if len(pg.Items) != 2 || pg.Items[0].Key.Name != "o08" || pg.Before != 7 || pg.Total != 9 || pg.More {
		t.Errorf("after the deleted o07: %+v, want o08 and o09, 7 before of 9", pg)
	}
	if _, ok := a.SortedAfter(q, byName, nil, MaxSortedPage+1); ok {
		t.Error("a page over MaxSortedPage was answered from the index")
	}
}

// TestSortIndexOverItsEstimate: an index that came out larger than the estimate it was learned
// under (long sort values) is not evicted while it is the only one: it keeps answering.
func TestSortIndexOverItsEstimate(t *testing.T) {
	a, ms, err := New(Options{Resource: "configmaps", SyncPollInterval: 5 * time.Millisecond, SortIndexBytes: 3 * (sortEntryBytes + sortValueGuess)})
	if err != nil {
		t.Fatal(err)
	}
	s := &source{}
	for i := range 3 {
		s.items = append(s.items, *cm("ns", fmt.Sprint("o", i), "1", map[string]string{"v": strings.Repeat("x", 60) + fmt.Sprint(i)}))
	}
	inf, _ := startInformer(t, s)
	if err := ms.Join("c1", inf); err != nil {
		t.Fatal(err)
	}
	a.WaitForSync(context.Background(), 5*time.Second)
	long := Sorter{Name: "asc v", Value: func(obj any) string { return obj.(*corev1.ConfigMap).Labels["v"] + strings.Repeat("y", 200) }}
	q := Query{Clusters: []string{"c1"}}
	waitTrue(t, "the index answers", func() bool { _, ok := a.SortedAfter(q, long, nil, 2); return ok })
	for range 5 {
		if pg, ok := a.SortedAfter(q, long, nil, 2); !ok || len(pg.Items) != 2 || !pg.More {
			t.Fatalf("the index over its estimate: %+v, %v", pg, ok)
		}
	}
	if si := a.SortIndexes(); len(si) != 1 || si[0].Bytes <= 3*(sortEntryBytes+sortValueGuess) || si[0].Answers < 6 {
		t.Errorf("sort indexes %+v: want one over its estimate, answering", si)
	}
}
