package aggregate

import (
	"context"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/multicache/multicache/pkg/index"
)

// TestLearnedIndexes: a key asked twice becomes a count index. Once it has had every cluster's
// list, summaries by it (alone and with cluster) read it, and equal counts by hand through adds,
// a change of value, deletes and a cluster that leaves. A summary with a filter never reads it.
// A where filter asked again by cluster is learned the same way. Beyond LearnedIndexes the
// least recently asked index is evicted, and its handler removed.
func TestLearnedIndexes(t *testing.T) {
	a, ms, err := New(Options{Resource: "configmaps", SyncPollInterval: 5 * time.Millisecond, LearnedIndexes: 2, CountedKeys: []string{}})
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

// TestLearnedIndexesOff: LearnedIndexes < 0 learns none, and keeps the kept counts.
func TestLearnedIndexesOff(t *testing.T) {
	a, _, _ := New(Options{Resource: "configmaps", LearnedIndexes: -1})
	for range 3 {
		_, _ = a.Summarize(Query{}, "label:tier")
	}
	if li := a.LearnedIndexes(); len(li) != 1 || li[0].Key != "namespace" || !li[0].Kept {
		t.Errorf("learned %+v with learning off, want only the kept namespace counts", li)
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

// TestKeptCounts: keys kept from the start (Options.CountedKeys, KeepCounts) answer their first
// summary from counts, alone and with cluster, and equal counts by hand through an add, a change
// of value, a delete and a cluster that leaves. A kept index that lost its handler (an
// overflow) is counted again from its next ask, which scans. Keys that cannot be kept are
// refused, naming the key.
func TestKeptCounts(t *testing.T) {
	a, ms, err := New(Options{Resource: "configmaps", SyncPollInterval: 5 * time.Millisecond, CountedKeys: []string{"namespace", "label:tier"}})
	if err != nil {
		t.Fatal(err)
	}
	tierIndex := func(obj any) ([]string, error) {
		if v, ok := obj.(*corev1.ConfigMap).Labels["tier"]; ok {
			return []string{v}, nil
		}
		return nil, nil
	}
	if err := a.AddIndex(IndexSpec{Name: "tier", Func: tierIndex}); err != nil {
		t.Fatal(err)
	}
	if err := a.KeepCounts("index:tier"); err != nil {
		t.Fatal(err)
	}
	if err := a.KeepCounts("index:tier"); err != nil {
		t.Errorf("keeping a kept key again: %v", err)
	}
	// objects is what the test made: cluster → namespace/name → tier ("" for none).
	objects := map[string]map[string]string{}
	sources := map[string]*source{}
	for _, c := range []string{"c1", "c2"} {
		s := &source{}
		objects[c] = map[string]string{}
		for i := range 9 {
			lbl := map[string]string{}
			if i%3 != 0 {
				lbl["tier"] = []string{"web", "db"}[i%2]
			}
			o := cm(fmt.Sprint("ns", i%2), fmt.Sprint("o", i), "1", lbl)
			s.items = append(s.items, *o)
			objects[c][o.Namespace+"/"+o.Name] = lbl["tier"]
		}
		inf, _ := startInformer(t, s)
		if err := ms.Join(c, inf); err != nil {
			t.Fatal(err)
		}
		sources[c] = s
	}
	a.WaitForSync(context.Background(), 5*time.Second)
	byHand := func(key string, withCluster bool) map[string]int {
		out := map[string]int{}
		for c, objs := range objects {
			for nn, tier := range objs {
				v := tier
				if key == "namespace" {
					v, _, _ = strings.Cut(nn, "/")
				}
				if v == "" {
					v = "<null>"
				}
				if withCluster {
					v = c + "|" + v
				}
				out[v]++
			}
		}
		return out
	}
	answers := func() map[string]int64 {
		out := map[string]int64{}
		for _, li := range a.LearnedIndexes() {
			if !li.Kept {
				t.Errorf("%s learned: only kept keys were asked", li.Key)
			}
			out[li.Key] = li.Answers
		}
		return out
	}
	waitTrue(t, "the kept indexes have had both lists", func() bool {
		li := a.LearnedIndexes()
		return len(li) == 3 && li[0].Clusters == 2 && li[1].Clusters == 2 && li[2].Clusters == 2
	})
	agree := func(what string) {
		t.Helper()
		for _, key := range []string{"namespace", "label:tier", "index:tier"} {
			hand := key
			if key != "namespace" {
				hand = "tier"
			}
			var got, gotC map[string]int
			var before, after map[string]int64
			if !waitUntil(func() bool {
				before = answers()
				s, err := a.Summarize(Query{}, key)
				if err != nil {
					t.Fatal(err)
				}
				sc, err := a.Summarize(Query{}, "cluster", key)
				if err != nil {
					t.Fatal(err)
				}
				got, gotC = groupsOf(s), groupsOf(sc)
				after = answers()
				return maps.Equal(got, byHand(hand, false)) && maps.Equal(gotC, byHand(hand, true)) && after[key] == before[key]+2
			}) {
				t.Fatalf("%s: by %s: %v and %v, want %v and %v; answers %v → %v", what, key, got, gotC, byHand(hand, false), byHand(hand, true), before, after)
			}
		}
	}
	agree("the first summaries read the kept counts")
	s1 := sources["c1"]
	s1.w.Add(cm("ns2", "new", "2", map[string]string{"tier": "cache"}))
	s1.w.Modify(cm("ns1", "o1", "3", map[string]string{"tier": "db"}))
	s1.w.Delete(cm("ns0", "o2", "4", map[string]string{"tier": "web"})) // its final state
	objects["c1"]["ns2/new"], objects["c1"]["ns1/o1"] = "cache", "db"
	delete(objects["c1"], "ns0/o2")
	agree("after an add, a change of value and a delete")
	ms.Leave("c2")
	delete(objects, "c2")
	agree("after c2 left")

	// An overflow (the handler's own OnOverflow) removes every kept index and starts them over
	// at once, with no ask.
	kept := func() []*countIndex {
		a.learn.mu.Lock()
		defer a.learn.mu.Unlock()
		return slices.Collect(maps.Values(a.learn.kept))
	}
	regOf := func(idx *countIndex) *Registration {
		idx.mu.Lock()
		defer idx.mu.Unlock()
		return idx.reg
	}
	lost := kept()
	lostReg := regOf(lost[0])
	lostReg.opts.OnOverflow()
	select {
	case <-lostReg.Done():
	case <-time.After(5 * time.Second):
		t.Error("the overflowed handler was not removed")
	}
	waitTrue(t, "the kept indexes started over after an overflow", func() bool {
		now := kept()
		for _, idx := range now {
			if slices.Contains(lost, idx) || idx.isRemoved() || regOf(idx) == nil {
				return false
			}
		}
		return len(now) == len(lost)
	})
	agree("counted again after an overflow")

	// The last member leaves: the kept indexes' handler stops, and they hold nothing. An ask
	// with no member starts nothing; a join starts them again.
	running := kept()
	ms.Leave("c1")
	select {
	case <-regOf(running[0]).Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the kept indexes' handler runs on with no member")
	}
	a.mu.RLock()
	regs := len(a.regs)
	a.mu.RUnlock()
	if _, err := a.Summarize(Query{}, "namespace"); err != nil {
		t.Fatal(err)
	}
	a.mu.RLock()
	if len(a.regs) != regs {
		t.Errorf("an ask with no member started a handler: %d registrations, %d before", len(a.regs), regs)
	}
	a.mu.RUnlock()
	for _, li := range a.LearnedIndexes() {
		if li.Clusters != 0 || li.Bytes != 0 {
			t.Errorf("with no member, %s reports %d clusters and %d bytes", li.Key, li.Clusters, li.Bytes)
		}
	}
	delete(objects, "c1")
	s3 := &source{items: []corev1.ConfigMap{*cm("ns5", "x", "1", map[string]string{"tier": "web"})}}
	inf, _ := startInformer(t, s3)
	if err := ms.Join("c3", inf); err != nil {
		t.Fatal(err)
	}
	objects["c3"] = map[string]string{"ns5/x": "web"}
	agree("a join after the last member left")

	// A join that races the last leave never leaves the kept indexes stopped with a member.
	for i := range 200 {
		s4 := &source{items: []corev1.ConfigMap{*cm("ns6", "y", "1", nil)}}
		inf, cancel := startInformer(t, s4)
		name := fmt.Sprint("r", i)
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); ms.Leave("c3") }()
		go func() {
			defer wg.Done()
			if err := ms.Join(name, inf); err != nil {
				t.Error(err)
			}
		}()
		wg.Wait()
		for _, idx := range kept() {
			if idx.isRemoved() {
				t.Fatalf("round %d: %s stopped while %v are members", i, idx.key.text, a.Clusters())
			}
		}
		ms.Leave(name)
		cancel()
		s3 = &source{items: []corev1.ConfigMap{*cm("ns5", "x", "1", map[string]string{"tier": "web"})}}
		inf, _ = startInformer(t, s3)
		if err := ms.Join("c3", inf); err != nil {
			t.Fatal(err)
		}
	}
	agree("after joins that raced the last leave")

	for _, bad := range []string{"cluster", "index:nope", "bogus:x", "owner"} {
		if err := a.KeepCounts(bad); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("KeepCounts(%q): %v, want an error naming it", bad, err)
		}
	}
	if _, _, err := New(Options{Resource: "configmaps", CountedKeys: []string{"namespace", "cluster"}}); err == nil || !strings.Contains(err.Error(), "Options.CountedKeys[1]") {
		t.Errorf("New with a counted key of cluster: %v, want an error naming Options.CountedKeys[1]", err)
	}
}

// BenchmarkKeptCounts measures what kept counts cost, side by side in each round: the same
// fleet built three times, with no kept counts, with the default (namespace), and with three
// (namespace, label:tier, index:app). For each: the process CPU from the first join until every
// cluster is synced and every kept index has had every list, and the CPU per update once
// synced, until a handler and the kept indexes have had every update. The rounds rotate the
// order. MULTICACHE_BENCH_KEPT_CLUSTERS × MULTICACHE_BENCH_KEPT_OBJECTS objects,
// MULTICACHE_BENCH_KEPT_UPDATES updates per cluster, MULTICACHE_BENCH_KEPT_ROUNDS rounds.
func BenchmarkKeptCounts(b *testing.B) {
	clusters, objects := envInt(b, "MULTICACHE_BENCH_KEPT_CLUSTERS", 4), envInt(b, "MULTICACHE_BENCH_KEPT_OBJECTS", 2000)
	updates, rounds := envInt(b, "MULTICACHE_BENCH_KEPT_UPDATES", 2000), envInt(b, "MULTICACHE_BENCH_KEPT_ROUNDS", 1)
	configs := []struct {
		name string
		keys []string
	}{{"none", []string{}}, {"default", nil}, {"three", []string{"namespace", "label:tier", "index:app"}}}
	appIndex := func(obj any) ([]string, error) {
		if v, ok := obj.(*corev1.ConfigMap).Labels["app"]; ok {
			return []string{v}, nil
		}
		return nil, nil
	}
	type figures struct{ build, perUpdate []time.Duration }
	got := make([]figures, len(configs))
	build := func(keys []string) (time.Duration, time.Duration) {
		var base []string
		for _, k := range keys {
			if !strings.HasPrefix(k, "index:") {
				base = append(base, k)
			}
		}
		if keys != nil && base == nil {
			base = []string{}
		}
		a, ms, err := New(Options{Resource: "configmaps", SyncPollInterval: 5 * time.Millisecond, CountedKeys: base})
		if err != nil {
			b.Fatal(err)
		}
		if err := a.AddIndex(IndexSpec{Name: "app", Func: appIndex}); err != nil {
			b.Fatal(err)
		}
		for _, k := range keys {
			if strings.HasPrefix(k, "index:") {
				if err := a.KeepCounts(k); err != nil {
					b.Fatal(err)
				}
			}
		}
		var told atomic.Int64 // the daemon's watch cache is a handler: here, one that counts
		if _, err := a.AddEventHandler(HandlerFuncs{UpdateFunc: func(string, any, any) { told.Add(1) }}); err != nil {
			b.Fatal(err)
		}
		kept := func(want int) bool {
			for _, li := range a.LearnedIndexes() {
				if li.Kept && li.Clusters != want {
					return false
				}
			}
			return true
		}
		runtime.GC()
		ru0 := readRusage()
		srcs := make([]*source, clusters)
		for c := range clusters {
			s := &source{rv: "1", w: watch.NewFakeWithChanSize(1024, false)}
			for i := range objects {
				s.items = append(s.items, *cm(fmt.Sprint("ns-", i%20), fmt.Sprint("o", i), "1", map[string]string{"tier": []string{"web", "db", "cache"}[i%3], "app": fmt.Sprint("app-", i%100)}))
			}
			srcs[c] = s
			inf := newMemberInformer(b, s.lw())
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go inf.RunWithContext(ctx)
			if err := ms.Join(fmt.Sprint("c", c), inf); err != nil {
				b.Fatal(err)
			}
		}
		if unsynced := a.WaitForSync(context.Background(), 10*time.Minute); len(unsynced) > 0 {
			b.Fatalf("unsynced: %v", unsynced)
		}
		for !kept(clusters) {
			time.Sleep(time.Millisecond)
		}
		ru1 := readRusage()
		var wg sync.WaitGroup
		for c, s := range srcs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range updates {
					s.w.Modify(cm(fmt.Sprint("ns-", i%20), fmt.Sprint("o", i%objects), fmt.Sprint(2+i), map[string]string{"tier": []string{"db", "cache", "web"}[(i+c)%3], "app": fmt.Sprint("app-", i%100)}))
				}
			}()
		}
		wg.Wait()
		for told.Load() < int64(clusters*updates) {
			time.Sleep(time.Millisecond)
		}
		for {
			idle := true
			a.learn.mu.Lock()
			idxs := slices.Collect(maps.Values(a.learn.kept))
			a.learn.mu.Unlock()
			for _, idx := range idxs {
				idx.mu.Lock()
				idle = idle && idx.reg != nil && idx.reg.Pending() == 0
				idx.mu.Unlock()
			}
			if idle {
				break
			}
			time.Sleep(time.Millisecond)
		}
		ru2 := readRusage()
		for _, c := range a.Clusters() {
			ms.Leave(c)
		}
		return ru1.cpu - ru0.cpu, (ru2.cpu - ru1.cpu) / time.Duration(clusters*updates)
	}
	for range b.N {
		for r := range rounds {
			for i := range configs {
				j := (i + r) % len(configs)
				bc, pu := build(configs[j].keys)
				got[j].build = append(got[j].build, bc)
				got[j].perUpdate = append(got[j].perUpdate, pu)
			}
		}
	}
	med := func(d []time.Duration) time.Duration {
		s := slices.Clone(d)
		slices.Sort(s)
		return s[len(s)/2]
	}
	for i, c := range configs {
		b.Logf("%-8s build CPU %v (%v–%v), %.0f%% of none's; CPU per update %v (%v–%v), %.0f%% of none's", c.name,
			med(got[i].build), slices.Min(got[i].build), slices.Max(got[i].build), 100*float64(med(got[i].build))/float64(med(got[0].build)),
			med(got[i].perUpdate), slices.Min(got[i].perUpdate), slices.Max(got[i].perUpdate), 100*float64(med(got[i].perUpdate))/float64(med(got[0].perUpdate)))
	}
}

// TestKeptCountsGiveUpPastTheBound: a kept key with about a value per object outgrows the byte
// bound on its own; it gives up (counts dropped, LearnedIndex.GivenUp), summaries by it read
// objects and stay right, other kept keys go on, and it stays given up across the last leave
// and the next join.
func TestKeptCountsGiveUpPastTheBound(t *testing.T) {
	a, ms, err := New(Options{Resource: "configmaps", SyncPollInterval: 5 * time.Millisecond,
		CountedKeys: []string{"namespace", "field:metadata.name"}, LearnedIndexBytes: 16 << 10})
	if err != nil {
		t.Fatal(err)
	}
	join := func(c string) context.CancelFunc {
		s := &source{}
		for i := range 1000 {
			s.items = append(s.items, *cm(fmt.Sprint("ns", i%4), fmt.Sprint("object-", i), "1", nil))
		}
		inf, cancel := startInformer(t, s)
		if err := ms.Join(c, inf); err != nil {
			t.Fatal(err)
		}
		return cancel
	}
	check := func(when string) {
		t.Helper()
		// A summary by name: 2,000 groups over two clusters, one object each, read from objects.
		s, err := a.Summarize(Query{}, "field:metadata.name")
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Groups) != 1000 || s.Total != 2000 || s.Groups[0].Count != 2 {
			t.Fatalf("%s: by name: %d groups, total %d, first %d; want 1000, 2000, 2", when, len(s.Groups), s.Total, s.Groups[0].Count)
		}
		var name, ns LearnedIndex
		deadline := time.Now().Add(10 * time.Second)
		for {
			for _, li := range a.LearnedIndexes() {
				switch li.Key {
				case "field:metadata.name":
					name = li
				case "namespace":
					ns = li
				}
			}
			if ns.Clusters == 2 && name.GivenUp || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if !name.GivenUp || name.Bytes != 0 || name.Clusters != 0 {
			t.Fatalf("%s: the name's kept counts: %+v, want given up with no bytes", when, name)
		}
		if ns.GivenUp || ns.Clusters != 2 {
			t.Fatalf("%s: the namespace's kept counts: %+v, want counting both clusters", when, ns)
		}
		before := answersOf(a, "namespace")
		s, err = a.Summarize(Query{}, "namespace")
		if err != nil || s.Total != 2000 || len(s.Groups) != 4 {
			t.Fatalf("%s: by namespace: %+v, %v", when, s, err)
		}
		if answersOf(a, "namespace") != before+1 {
			t.Fatalf("%s: the namespace's kept counts did not answer", when)
		}
		for _, li := range a.LearnedIndexes() {
			if !li.Kept {
				t.Fatalf("%s: %q became a learned index: it would outgrow the bound too", when, li.Key)
			}
		}
	}
	stop1, stop2 := join("c1"), join("c2")
	a.WaitForSync(context.Background(), 5*time.Second)
	check("after the joins")
	check("asked again") // a second ask does not learn the name either
	stop1()
	stop2()
	ms.Leave("c1")
	ms.Leave("c2")
	join("c1")
	join("c2")
	a.WaitForSync(context.Background(), 5*time.Second)
	check("after the last leave and new joins")
}

// TestCloseStopsIndexes: Close removes the handlers of the kept counts, the learned indexes
// and the sort indexes; the members stay and answer, summaries read objects and stay right,
// and neither asks nor a later join start anything again.
func TestCloseStopsIndexes(t *testing.T) {
	a, ms, err := New(Options{Resource: "configmaps", SyncPollInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	join := func(c string) {
		s := &source{}
		for i := range 20 {
			s.items = append(s.items, *cm(fmt.Sprint("ns", i%2), fmt.Sprint("o", i), "1", map[string]string{"rank": fmt.Sprint(i % 3)}))
		}
		inf, _ := startInformer(t, s)
		if err := ms.Join(c, inf); err != nil {
			t.Fatal(err)
		}
	}
	join("c1")
	a.WaitForSync(context.Background(), 5*time.Second)
	rank := Sorter{Name: "rank", Value: func(obj any) string { return obj.(*corev1.ConfigMap).Labels["rank"] }}
	all := Query{Clusters: []string{"c1"}}
	handlers := func() int {
		a.mu.Lock()
		defer a.mu.Unlock()
		return len(a.regs)
	}
	waitTrue(t, "kept, learned and sort indexes running", func() bool {
		_, _ = a.Summarize(Query{}, "label:rank")
		a.SortedAfter(all, rank, nil, 5)
		return handlers() == 3 && len(a.SortIndexes()) == 1 && len(a.LearnedIndexes()) == 2
	})
	ms.Close()
	waitTrue(t, "every handler removed", func() bool { return handlers() == 0 })
	for range 3 {
		s, err := a.Summarize(Query{}, "namespace")
		if err != nil || s.Total != 20 || len(s.Groups) != 2 || s.Groups[0].Count != 10 {
			t.Fatalf("by namespace after Close: %+v, %v", s, err)
		}
		if _, err := a.Summarize(Query{}, "label:rank"); err != nil {
			t.Fatal(err)
		}
		if _, ok := a.SortedAfter(all, rank, nil, 5); ok {
			t.Fatal("a sort index answered after Close")
		}
	}
	join("c2")
	a.WaitForSync(context.Background(), 5*time.Second)
	if s, _ := a.Summarize(Query{}, "namespace"); s.Total != 40 {
		t.Fatalf("after a join: total %d, want 40", s.Total)
	}
	time.Sleep(50 * time.Millisecond)
	if n := handlers(); n != 0 {
		t.Fatalf("%d handlers after Close, asks and a join; want none", n)
	}
	if n := len(a.SortIndexes()); n != 0 {
		t.Fatalf("%d sort indexes after Close", n)
	}
}
