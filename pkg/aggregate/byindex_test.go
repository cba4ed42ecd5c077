package aggregate

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
)

// byIndexFleet joins clusters c1, c2 and c3, each with ConfigMaps a/x0, a/x1, b/y0 and b/y1
// labelled app=web (x0, y0) or app=db (x1, y1), and adds index "app", which applies to c1 and
// c3 only. It returns the Key string of every stored object, by the object.
func byIndexFleet(t *testing.T) (*Aggregate, map[any]string) {
	t.Helper()
	a := newAgg(t)
	if err := a.AddIndex(IndexSpec{Name: "app", Clusters: []string{"c1", "c3"}, Func: func(obj any) ([]string, error) {
		return []string{obj.(*corev1.ConfigMap).Labels["app"]}, nil
	}}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"c1", "c2", "c3"} {
		s := &source{}
		for _, ns := range []string{"a", "b"} {
			for i, app := range []string{"web", "db"} {
				name := map[string]string{"a": "x", "b": "y"}[ns] + strconv.Itoa(i)
				s.items = append(s.items, *cm(ns, name, "1", map[string]string{"app": app}))
			}
		}
		inf, _ := startInformer(t, s)
		if err := a.join(c, inf); err != nil {
			t.Fatal(err)
		}
	}
	if missing := a.WaitForSync(context.Background(), 5*time.Second); missing != nil {
		t.Fatalf("unsynced: %v", missing)
	}
	keys := map[any]string{}
	for _, c := range a.Clusters() {
		store, _ := a.Cluster(c)
		for _, o := range store.List() {
			k, _ := KeyOf(c, o)
			keys[o] = k.String()
		}
	}
	return a, keys
}

// answerKeys returns the Key strings of objs, failing the test unless their clusters come in
// order.
func answerKeys(t *testing.T, what string, keys map[any]string, objs []any) []string {
	t.Helper()
	var out []string
	last := ""
	for _, o := range objs {
		k, ok := keys[o]
		if !ok {
			t.Fatalf("%s: %v is not a stored object", what, o)
		}
		c := k[:len("c1")]
		if c < last {
			t.Errorf("%s: cluster %s after %s", what, c, last)
		}
		last = c
		out = append(out, k)
	}
	return sorted(out)
}

// TestAppendByIndex: for every kind of index, AppendByIndex appends to what dst holds exactly
// what ByIndex returns, and both return the right objects, members in cluster order.
func TestAppendByIndex(t *testing.T) {
	a, keys := byIndexFleet(t)
	for _, tc := range []struct {
		index, value string
		want         []string
	}{
		{IndexNamespace, "a", []string{"c1|a/x0", "c1|a/x1", "c2|a/x0", "c2|a/x1", "c3|a/x0", "c3|a/x1"}},
		{IndexNamespace, "none", nil},
		{IndexCluster, "c2", []string{"c2|a/x0", "c2|a/x1", "c2|b/y0", "c2|b/y1"}},
		{IndexCluster, "c9", nil},
		{IndexClusterNamespace, "c3/b", []string{"c3|b/y0", "c3|b/y1"}},
		{"app", "web", []string{"c1|a/x0", "c1|b/y0", "c3|a/x0", "c3|b/y0"}}, // not c2: the index does not apply there
		{"app", "none", nil},
	} {
		what := tc.index + "=" + tc.value
		objs, err := a.ByIndex(tc.index, tc.value)
		if err != nil {
			t.Fatalf("ByIndex %s: %v", what, err)
		}
		eq(t, "ByIndex "+what, answerKeys(t, what, keys, objs), tc.want)
		dst := []any{"kept"}
		got, err := a.AppendByIndex(dst, tc.index, tc.value)
		if err != nil {
			t.Fatalf("AppendByIndex %s: %v", what, err)
		}
		if len(got) == 0 || got[0] != "kept" {
			t.Fatalf("AppendByIndex %s: dst's element lost: %v", what, got)
		}
		eq(t, "AppendByIndex "+what, answerKeys(t, what, keys, got[1:]), tc.want)
	}
	for _, index := range []string{"nope", IndexClusterNamespace} {
		dst := []any{"kept"}
		got, err := a.AppendByIndex(dst, index, "c1")
		if err == nil || len(got) != 1 || got[0] != "kept" {
			t.Errorf("AppendByIndex %s=c1: %v %v, want dst and an error", index, got, err)
		}
		if _, err := a.ByIndex(index, "c1"); err == nil {
			t.Errorf("ByIndex %s=c1: no error", index)
		}
	}
}

// TestAppendByIndexReusesDst: an answer that fits in dst's capacity is written into dst's
// array, whatever the previous answer was; one that does not gets a new array and leaves dst's
// alone.
func TestAppendByIndexReusesDst(t *testing.T) {
	a, keys := byIndexFleet(t)
	buf := make([]any, 0, 16)
	got, _ := a.AppendByIndex(buf, IndexNamespace, "a")
	if len(got) != 6 || &got[0] != &buf[:1][0] {
		t.Fatalf("first answer: %d objects, same array %v", len(got), len(got) > 0 && &got[0] == &buf[:1][0])
	}
	got, _ = a.AppendByIndex(got[:0], "app", "db")
	if &got[0] != &buf[:1][0] {
		t.Error("second answer not in dst's array")
	}
	eq(t, "second answer", answerKeys(t, "app=db", keys, got), []string{"c1|a/x1", "c1|b/y1", "c3|a/x1", "c3|b/y1"})

	small := make([]any, 1, 2)
	small[0] = "kept"
	got, _ = a.AppendByIndex(small, IndexCluster, "c1")
	if len(got) != 5 || got[0] != "kept" || &got[0] == &small[0] || small[:2][1] != nil {
		t.Errorf("answer beyond dst's capacity: %d objects, dst's array written %v", len(got), small[:2][1] != nil)
	}
}

// TestAppendByIndexAllocs: with room in dst, AppendByIndex allocates only what the members'
// client-go stores allocate answering the same lookups (one slice per store that finds
// something), and ByIndex one slice more when several members answer.
func TestAppendByIndexAllocs(t *testing.T) {
	a, _ := byIndexFleet(t)
	stores := map[string]cache.Indexer{}
	for _, c := range a.Clusters() {
		stores[c], _ = a.Cluster(c)
	}
	buf := make([]any, 0, 64)
	for _, tc := range []struct {
		index, value string
		clusters     []string // whose stores the lookup asks
		answering    int      // how many of them find something
	}{
		{IndexNamespace, "b", []string{"c1", "c2", "c3"}, 3},
		{IndexNamespace, "none", []string{"c1", "c2", "c3"}, 0},
		{IndexClusterNamespace, "c2/a", []string{"c2"}, 1},
		{"app", "web", []string{"c1", "c3"}, 2},
	} {
		what := tc.index + "=" + tc.value
		idx, v := tc.index, tc.value
		if idx == IndexClusterNamespace {
			idx, v = IndexNamespace, tc.value[len("c2/"):]
		}
		clientGo := testing.AllocsPerRun(100, func() {
			for _, c := range tc.clusters {
				_, _ = stores[c].ByIndex(idx, v)
			}
		})
		if clientGo != float64(tc.answering) {
			t.Fatalf("%s: client-go's stores allocate %v times, want %d", what, clientGo, tc.answering)
		}
		if n := testing.AllocsPerRun(100, func() { buf, _ = a.AppendByIndex(buf[:0], tc.index, tc.value) }); n != clientGo {
			t.Errorf("AppendByIndex %s: %v allocations, client-go's stores %v", what, n, clientGo)
		}
		want := clientGo
		if tc.answering > 1 {
			want++
		}
		if n := testing.AllocsPerRun(100, func() { _, _ = a.ByIndex(tc.index, tc.value) }); n != want {
			t.Errorf("ByIndex %s: %v allocations, want %v", what, n, want)
		}
	}
}

// TestAppendByIndexDuringUpdates: queries with their own buffers, concurrent with watch updates
// that replace every object (same labels) and add others, see every labelled object once.
func TestAppendByIndexDuringUpdates(t *testing.T) {
	a := newAgg(t)
	if err := a.AddIndex(IndexSpec{Name: "app", Func: func(obj any) ([]string, error) {
		return []string{obj.(*corev1.ConfigMap).Labels["app"]}, nil
	}}); err != nil {
		t.Fatal(err)
	}
	const perCluster = 50
	var srcs []*source
	for c := range 3 {
		s := &source{}
		for i := range perCluster {
			s.items = append(s.items, *cm("a", "o"+strconv.Itoa(i), "1", map[string]string{"app": "web"}))
		}
		inf, _ := startInformer(t, s)
		if err := a.join("c"+strconv.Itoa(c), inf); err != nil {
			t.Fatal(err)
		}
		srcs = append(srcs, s)
	}
	if missing := a.WaitForSync(context.Background(), 5*time.Second); missing != nil {
		t.Fatalf("unsynced: %v", missing)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			buf := make([]any, 0, 8)
			for {
				select {
				case <-done:
					return
				default:
				}
				var err error
				if buf, err = a.AppendByIndex(buf[:0], "app", "web"); err != nil || len(buf) != 3*perCluster {
					t.Errorf("app=web: %d objects, %v", len(buf), err)
					return
				}
			}
		})
	}
	for round := 2; round < 6; round++ {
		for _, s := range srcs {
			for i := range perCluster {
				o := s.items[i].DeepCopy()
				o.ResourceVersion = strconv.Itoa(round)
				s.w.Modify(o)
				s.w.Add(cm("b", fmt.Sprintf("n%d-%d", round, i), strconv.Itoa(round), map[string]string{"app": "db"}))
			}
		}
	}
	waitTrue(t, "updates applied", func() bool {
		objs, _ := a.ByIndex("app", "db")
		return len(objs) == 4*3*perCluster
	})
	close(done)
	wg.Wait()
}
