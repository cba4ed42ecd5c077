package aggregate

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/multicache/multicache/pkg/index"
)

// TestLearnedIndexes: a key asked twice becomes a count index. Once it has had every cluster's
// list, summaries by it (alone and with cluster) read it, and equal counts by hand through adds,
// a change of value, deletes and a cluster that leaves. A summary with a filter never reads it.
// A where filter asked again by cluster is learned the same way. Beyond LearnedIndexes the
// least recently asked index is evicted, and its handler removed.
func TestLearnedIndexes(t *testing.T) {
	a, ms, err := New(Options{Resource: "configmaps", SyncPollInterval: 5 * time.Millisecond, LearnedIndexes: 2})
	if err != nil {
		t.Fatal(err)
	}
	sources := map[string]*source{}
	for _, c := range []string{"c1", "c2"} {
		s := &source{}
		for i := range 6 {
			lbl := map[string]string{}
			if i%3 != 0 {
				lbl["tier"] = []string{"web", "db"}[i%2]
			}
			s.items = append(s.items, *cm("ns", fmt.Sprint("o", i), "1", lbl))
		}
		inf, _ := startInformer(t, s)
		if err := ms.Join(c, inf); err != nil {
			t.Fatal(err)
		}
		sources[c] = s
	}
	a.WaitForSync(context.Background(), 5*time.Second)
	// objects is what the test made: cluster → name → tier ("" for none).
	objects := map[string]map[string]string{"c1": {}, "c2": {}}
	for c, s := range sources {
		for _, o := range s.items {
			objects[c][o.Name] = o.Labels["tier"]
		}
	}
	byHand := func(withCluster bool) map[string]int {
		out := map[string]int{}
		for c, objs := range objects {
			for _, tier := range objs {
				if tier == "" {
					tier = "<null>"
				}
				if withCluster {
					tier = c + "|" + tier
				}
				out[tier]++
			}
		}
		return out
	}
	summary := func(q Query, by ...string) map[string]int {
		t.Helper()
		s, err := a.Summarize(q, by...)
		if err != nil {
			t.Fatal(err)
		}
		return groupsOf(s)
	}
	answers := func() int64 {
		var n int64
		for _, li := range a.LearnedIndexes() {
			n += li.Answers
		}
		return n
	}
	summary(Query{}, "label:tier")
	if len(a.LearnedIndexes()) != 0 {
		t.Fatal("an index after one ask")
	}
	summary(Query{}, "label:tier")
	waitTrue(t, "the index has had both lists", func() bool {
		li := a.LearnedIndexes()
		return len(li) == 1 && li[0].Key == "label:tier" && li[0].Clusters == 2 && li[0].Bytes > 0
	})
	agree := func(what string) {
		t.Helper()
		var got, gotC map[string]int
		var before, after int64
		if !waitUntil(func() bool {
			before = answers()
			got, gotC = summary(Query{}, "label:tier"), summary(Query{}, "cluster", "label:tier")
			after = answers()
			return maps.Equal(got, byHand(false)) && maps.Equal(gotC, byHand(true)) && after == before+2
		}) {
			t.Fatalf("%s: %v and %v, want %v and %v; index answers %d → %d, learned %+v", what, got, gotC, byHand(false), byHand(true), before, after, a.LearnedIndexes())
		}
	}
	agree("summaries read the index, and equal counts by hand")
	tierWeb, _ := labels.Parse("tier=web")
	before := answers()
	if got := summary(Query{Labels: tierWeb}, "label:tier"); got["web"] != 4 || len(got) != 1 || answers() != before {
		t.Errorf("a filtered summary: %v, index answers %d → %d; want {web:4} by a scan", got, before, answers())
	}
	s1 := sources["c1"]
	s1.w.Add(cm("ns", "new", "2", map[string]string{"tier": "cache"}))
	s1.w.Modify(cm("ns", "o1", "3", map[string]string{"tier": "db"}))
	s1.w.Delete(cm("ns", "o2", "4", map[string]string{"tier": "web"}))
	objects["c1"]["new"], objects["c1"]["o1"] = "cache", "db"
	delete(objects["c1"], "o2")
	agree("after an add, a change of value and a delete")
	// A burst: one object changes value 200 times, then goes. Each count moves from the
	// value it was told, so none drifts.
	s1.w.Add(cm("ns", "busy", "10", map[string]string{"tier": "web"}))
	for i := range 200 {
		s1.w.Modify(cm("ns", "busy", fmt.Sprint(11+i), map[string]string{"tier": []string{"db", "cache", "web"}[i%3]}))
	}
	s1.w.Delete(cm("ns", "busy", "211", map[string]string{"tier": "cache"})) // its final state, as an API server's DELETED
	agree("after a burst of changes and a delete")
	// A where filter asked again by cluster is learned too.
	const expr = "has(object.metadata.labels) && has(object.metadata.labels.tier) && object.metadata.labels.tier == 'db'"
	f, err := index.CompileFilter(expr)
	if err != nil {
		t.Fatal(err)
	}
	whereDB := func() Query {
		return Query{Fields: []FieldTerm{{Field: "where", Value: "true", Values: f.Bind().Values, Where: expr}}}
	}
	dbByHand := func() map[string]int {
		out := map[string]int{}
		for c, objs := range objects {
			for _, tier := range objs {
				if tier == "db" {
					out[c]++
				}
			}
		}
		return out
	}
	summary(whereDB(), "cluster")
	summary(whereDB(), "cluster")
	waitTrue(t, "the where index answers, and equals counts by hand", func() bool {
		before := answers()
		return maps.Equal(summary(whereDB(), "cluster"), dbByHand()) && answers() == before+1
	})
	s1.w.Modify(cm("ns", "new", "5", map[string]string{"tier": "db"}))
	objects["c1"]["new"] = "db"
	waitTrue(t, "the where index follows a change", func() bool { return maps.Equal(summary(whereDB(), "cluster"), dbByHand()) })
	ms.Leave("c2")
	delete(objects, "c2")
	agree("after c2 left")

	// Two indexes at most: the next key learned evicts the least recently asked (the where
	// index), and removes its handler.
	old := a.learn
	old.mu.Lock()
	e, _ := old.asked.Peek("where:" + expr)
	old.mu.Unlock()
	summary(Query{}, "namespace")
	summary(Query{}, "namespace")
	var keys []string
	for _, li := range a.LearnedIndexes() {
		keys = append(keys, li.Key)
	}
	if !slices.Equal(keys, []string{"label:tier", "namespace"}) {
		t.Errorf("learned after a third key: %v, want label:tier and namespace", keys)
	}
	select {
	case <-e.idx.reg.Done():
	case <-time.After(5 * time.Second):
		t.Error("the evicted index's handler was not removed")
	}
}

// TestLearnedIndexesOff: LearnedIndexes < 0 learns none.
func TestLearnedIndexesOff(t *testing.T) {
	a, _, _ := New(Options{Resource: "configmaps", LearnedIndexes: -1})
	for range 3 {
		_, _ = a.Summarize(Query{}, "label:tier")
	}
	if li := a.LearnedIndexes(); len(li) != 0 {
		t.Errorf("learned %+v with learning off", li)
	}
}

// waitUntil polls f for up to 10 seconds.
func waitUntil(f func() bool) bool {
	deadline := time.Now().Add(10 * time.Second)
	for !f() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}
