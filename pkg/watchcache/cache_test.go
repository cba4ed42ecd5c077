package watchcache

import (
	"errors"
	"fmt"
	mrand "math/rand"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
	"weak"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

func TestPositionRoundTrip(t *testing.T) {
	tok := Position{Epoch: "abc", Seq: 10}
	got, err := ParsePosition(tok.String())
	if err != nil || !reflect.DeepEqual(got, tok) {
		t.Errorf("round trip: %+v %v", got, err)
	}
	for _, bad := range []string{"", "!!", "e30", "eyJlIjoiIn0"} {
		if _, err := ParsePosition(bad); err == nil {
			t.Errorf("ParsePosition(%q) accepted", bad)
		}
	}
}

func cmAt(name, rv string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", ResourceVersion: rv}}
}

func newTestCache(maxEvents, maxBytes int) *Cache {
	return New(Options{MaxEvents: maxEvents, MaxBytes: maxBytes})
}

// TestCacheSnapshot: a snapshot at a position is what the events up to it built, whatever came
// after, as long as the events after it are kept.
func TestCacheSnapshot(t *testing.T) {
	h := newTestCache(100, 1<<30)
	h.OnAdd("c1", cmAt("a", "1"), false)
	h.OnAdd("c2", cmAt("b", "1"), false)
	at := h.Position()
	h.OnUpdate("c1", nil, cmAt("a", "2"))
	h.OnUpdate("c1", nil, cmAt("a", "3"))
	h.OnDelete("c2", cmAt("b", "1"))
	h.OnAdd("c2", cmAt("c", "1"), false)
	state := func(items []Item) map[string]string {
		out := map[string]string{}
		for _, it := range items {
			out[it.Key.String()] = it.Object.(*corev1.ConfigMap).ResourceVersion
		}
		return out
	}
	got, err := h.Snapshot(at, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"c1|ns/a": "1", "c2|ns/b": "1"}; !reflect.DeepEqual(state(got), want) {
		t.Errorf("snapshot at 2: %v, want %v", state(got), want)
	}
	got, _ = h.Snapshot(h.Position(), []string{"c2"})
	if want := map[string]string{"c2|ns/c": "1"}; !reflect.DeepEqual(state(got), want) {
		t.Errorf("snapshot now, c2 only: %v, want %v", state(got), want)
	}
	got, _ = h.Snapshot(at, []string{"c2"})
	if want := map[string]string{"c2|ns/b": "1"}; !reflect.DeepEqual(state(got), want) {
		t.Errorf("snapshot at 2, c2 only: %v, want %v", state(got), want)
	}
	// Clusters named twice, and one unknown: each object once.
	for _, pos := range []Position{at, h.Position()} {
		want := map[string]string{"c1|ns/a": "1", "c2|ns/b": "1"}
		if pos.Seq == h.Position().Seq {
			want = map[string]string{"c1|ns/a": "3", "c2|ns/c": "1"}
		}
		got, _ = h.Snapshot(pos, []string{"c2", "c1", "c2", "c9"})
		if len(got) != len(want) || !reflect.DeepEqual(state(got), want) {
			t.Errorf("snapshot at %d of c2, c1, c2 and c9: %d items %v, want %v", pos.Seq, len(got), state(got), want)
		}
	}
	small := newTestCache(2, 1<<30)
	small.OnAdd("c1", cmAt("a", "1"), false)
	old := small.Position()
	for i := 2; i <= 4; i++ {
		small.OnUpdate("c1", nil, cmAt("a", strconv.Itoa(i)))
	}
	if _, err := small.Snapshot(old, nil); err == nil {
		t.Error("snapshot at a position whose later events were evicted: no error")
	}
	if _, err := small.Snapshot(Position{Epoch: "other", Seq: 1}, nil); err == nil {
		t.Error("snapshot at another epoch's position: no error")
	}
}

// TestCacheResumeAndExpiry: positions are the cache's sequence; a position whose later events were
// evicted expires, unless none of them concern the clusters watched; another epoch expires.
func TestCacheResumeAndExpiry(t *testing.T) {
	h := newTestCache(3, 1<<30)
	for i := 1; i <= 5; i++ {
		h.OnAdd("c1", cmAt("x"+strconv.Itoa(i), strconv.Itoa(i)), false)
	}
	if _, _, err := h.Next(Position{Epoch: h.Position().Epoch, Seq: 1}, nil, make([]Event, 0, 10)); err == nil {
		t.Error("resume from an evicted position: no error")
	}
	evs, wake, err := h.Next(Position{Epoch: h.Position().Epoch, Seq: 3}, nil, make([]Event, 0, 10))
	if err != nil || len(evs) != 2 || evs[0].Seq != 4 || wake != nil {
		t.Errorf("resume from 3: %+v %v", evs, err)
	}
	// Only c1's events were evicted: a watch of c2 alone keeps its position.
	if _, _, err := h.Next(Position{Epoch: h.Position().Epoch, Seq: 1}, []string{"c2"}, make([]Event, 0, 10)); err != nil {
		t.Errorf("a watch of c2 from an old position, only c1's events evicted: %v", err)
	}
	// A watch that names c1 among others has lost c1's events.
	if _, _, err := h.Next(Position{Epoch: h.Position().Epoch, Seq: 1}, []string{"c0", "c1", "c2"}, make([]Event, 0, 10)); err == nil {
		t.Error("a watch of c0, c1 and c2 from a position c1's evicted events followed: no error")
	}
	// Caught up: nothing, and a channel that closes on the next event.
	evs, wake, err = h.Next(h.Position(), nil, make([]Event, 0, 10))
	if err != nil || len(evs) != 0 || wake == nil {
		t.Fatalf("caught up: %v %v %v", evs, wake, err)
	}
	h.OnDelete("c1", cache.DeletedFinalStateUnknown{Key: "ns/x5", Obj: cmAt("x5", "5")})
	select {
	case <-wake:
	case <-time.After(time.Second):
		t.Fatal("an appended event did not wake the watch")
	}
	if _, _, err := h.Next(Position{Epoch: "other", Seq: 5}, nil, make([]Event, 0, 10)); err == nil {
		t.Error("a position of another epoch: no error")
	}
	// An overflow of the cache's own backlog expires every position.
	pos := h.Position()
	h.Overflow()
	if _, _, err := h.Next(pos, nil, make([]Event, 0, 10)); err == nil {
		t.Error("a position from before an overflow: no error")
	}
}

func FuzzParsePosition(f *testing.F) {
	f.Add(Position{Epoch: "e", Seq: 1}.String())
	f.Add(Position{Parts: map[string]PartPosition{"r": {RV: "x", Set: "y"}}}.String())
	f.Add("eyJlIjoib2xkIiwidiI6e319")
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := ParsePosition(s)
		if err != nil {
			return
		}
		again, err := ParsePosition(tok.String())
		if err != nil || !reflect.DeepEqual(again, tok) {
			t.Fatalf("accepted position does not round-trip: %q", s)
		}
	})
}

// TestCacheRingIsBoundedByMemory: under churn the watch ring holds replaced objects for resuming
// watches and snapshots. It keeps them within a memory bound, not a count alone: with 64 MiB,
// 2,000 updates of 20 objects of 64 KiB (estimated at 3× that in memory) must keep at most
// about 340 states reachable besides the 20 current ones, not 2,000.
func TestCacheRingIsBoundedByMemory(t *testing.T) {
	h := newTestCache(100000, 64<<20)
	var refs []weak.Pointer[corev1.ConfigMap]
	big := strings.Repeat("x", 64<<10)
	for i := range 2000 {
		name := "o" + strconv.Itoa(i%20)
		cur := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", ResourceVersion: strconv.Itoa(i)}, Data: map[string]string{"v": big + strconv.Itoa(i)}}
		h.OnUpdate("c1", nil, cur)
		refs = append(refs, weak.Make(cur))
	}
	runtime.GC()
	runtime.GC()
	reachable := 0
	for _, w := range refs {
		if w.Value() != nil {
			reachable++
		}
	}
	runtime.KeepAlive(h)
	if reachable > 420 {
		t.Errorf("%d states of 64 KiB (%d MiB) are reachable through the watch cache after 2,000 updates of 20 objects", reachable, reachable*64>>10)
	}
	if reachable < 20 {
		t.Errorf("only %d states reachable: the cache lost current objects", reachable)
	}
}

// TestCacheHandoffIsNoDelete: a cluster handed to another replica leaves the cache without a DELETE
// event. A watch or exact snapshot that spans it from before the handoff ends with 410; one
// that does not span it reads on; positions after the handoff go on; a rejoin is adds.
func TestCacheHandoffIsNoDelete(t *testing.T) {
	h := newTestCache(100, 1<<30)
	h.OnAdd("c1", cmAt("a", "1"), false)
	h.OnAdd("c2", cmAt("b", "1"), false)
	before := h.Position()
	h.OnUpdate("c1", nil, cmAt("a", "2"))
	h.OnHandoff("c1")
	after := h.Position()

	var expired *GoneError
	if _, _, err := h.Next(before, []string{"c1", "c2"}, make([]Event, 0, 10)); !errors.As(err, &expired) {
		t.Errorf("watch of c1 and c2 from before the handoff: err = %v, want 410", err)
	}
	if _, _, err := h.Next(before, nil, make([]Event, 0, 10)); !errors.As(err, &expired) {
		t.Errorf("watch of every cluster from before the handoff: err = %v, want 410", err)
	}
	if _, err := h.Snapshot(before, []string{"c1"}); !errors.As(err, &expired) {
		t.Errorf("snapshot of c1 from before the handoff: err = %v, want 410", err)
	}
	evs, _, err := h.Next(before, []string{"c2"}, make([]Event, 0, 10))
	if err != nil {
		t.Fatalf("watch of c2 only: %v", err)
	}
	for _, ev := range evs {
		if ev.Type == Deleted {
			t.Errorf("the cache made a DELETE of %s", ev.Key)
		}
	}
	snap, err := h.Snapshot(after, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap) != 1 || snap[0].Key.Cluster != "c2" {
		t.Errorf("snapshot after the handoff = %v, want c2's object only", snap)
	}
	if _, _, err := h.Next(after, []string{"c1", "c2"}, make([]Event, 0, 10)); err != nil {
		t.Errorf("watch from after the handoff: %v", err)
	}
	h.OnAdd("c1", cmAt("a", "3"), true)
	evs, _, err = h.Next(after, []string{"c1"}, make([]Event, 0, 10))
	if err != nil || len(evs) != 1 || evs[0].Type != Added {
		t.Errorf("rejoin after the handoff: %v, %v; want one ADDED", evs, err)
	}
}

// TestInitialListSizesAreSampled: an initial list's objects are charged about their size
// (one in initialSampleEvery measured, the rest at the running mean), so the ring's byte bound
// holds about as it would with every object measured.
func TestInitialListSizesAreSampled(t *testing.T) {
	var s sizeSampler
	exact, charged := 0, 0
	for i := range 1000 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i), Namespace: "ns"},
			Data: map[string]string{"k": strings.Repeat("x", 100+i%50)}}
		exact += ApproxSize(cm)
		charged += s.size(cm)
	}
	if ratio := float64(charged) / float64(exact); ratio < 0.9 || ratio > 1.1 {
		t.Errorf("charged %d bytes for objects of %d: ratio %.2f, want within 10%%", charged, exact, ratio)
	}

	// Through a Cache: an initial list of varied objects is charged about what it holds, live
	// events their measured size, and eviction gives back what was charged.
	c := New(Options{MaxEvents: 1 << 20, MaxBytes: 1 << 40})
	exact = 0
	for i := range 500 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i), Namespace: "ns"},
			Data: map[string]string{"k": strings.Repeat("x", 500+(i*37)%1000)}}
		exact += ApproxSize(cm)
		c.OnAdd("a", cm, true)
	}
	c.mu.Lock()
	got := c.bytes
	c.mu.Unlock()
	if ratio := float64(got) / float64(exact); ratio < 0.85 || ratio > 1.15 {
		t.Errorf("an initial list of %d bytes was charged %d: ratio %.2f", exact, got, ratio)
	}
	big := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "big", Namespace: "ns"}, Data: map[string]string{"k": strings.Repeat("x", 10000)}}
	c.OnAdd("a", big, false)
	c.OnUpdate("a", big, big)
	c.mu.Lock()
	if want := got + 3*ApproxSize(big); c.bytes != want { // the add, and the update with its previous state
		t.Errorf("ring bytes %d, want %d", c.bytes, want)
	}
	for c.n > 0 {
		c.evictLocked()
	}
	if c.bytes != 0 {
		t.Errorf("every event evicted, %d bytes still charged", c.bytes)
	}
	c.mu.Unlock()
}

// TestClusterSnapshotsReadAsSnapshot: reading clusters one at a time as of a position, with
// events (adds, updates, deletes, re-adds, handoffs, in read and unread clusters, evicted or
// not, a ring that grows, an epoch reset) coming before and between the reads, each read
// answers what Snapshot answers for that cluster at the same moment: the same objects at the
// same sequences; and fails alike once an event of the cluster after the position was
// evicted, the cluster moved or the epoch ended. A cluster is read once, and only one asked
// for.
func TestClusterSnapshotsReadAsSnapshot(t *testing.T) {
	type entry struct {
		rv  string
		seq uint64
	}
	byKey := func(items []Item) map[string]entry {
		out := map[string]entry{}
		for _, it := range items {
			out[it.Key.String()] = entry{it.Object.(*corev1.ConfigMap).ResourceVersion, it.Seq}
		}
		return out
	}
	reads, gone, handoffs, overflows, grown := 0, 0, 0, 0, 0
	for seed := range int64(300) {
		rng := mrand.New(mrand.NewSource(seed))
		maxEvents := 20 + rng.Intn(200)
		if seed%10 == 0 {
			maxEvents = 3000 // a ring that grows past its first 1,024 between reads
		}
		h := newTestCache(maxEvents, 1<<30)
		clusters := []string{"c0", "c1", "c2", "c3", "c4"}
		rv := 0
		live := map[string]map[string]bool{}
		write := func() {
			cl := clusters[rng.Intn(len(clusters))]
			name := "o" + strconv.Itoa(rng.Intn(6))
			if live[cl] == nil {
				live[cl] = map[string]bool{}
			}
			rv++
			switch {
			case rng.Intn(400) == 0:
				h.OnHandoff(cl) // it moves away (and may come back below)
				live[cl] = map[string]bool{}
				handoffs++
			case rng.Intn(2000) == 0:
				h.Overflow()
				live = map[string]map[string]bool{}
				overflows++
			case !live[cl][name]:
				h.OnAdd(cl, cmAt(name, strconv.Itoa(rv)), false)
				live[cl][name] = true
			case rng.Intn(3) == 0:
				h.OnDelete(cl, cmAt(name, strconv.Itoa(rv)))
				delete(live[cl], name)
			default:
				h.OnUpdate(cl, nil, cmAt(name, strconv.Itoa(rv)))
			}
		}
		for range rng.Intn(40) {
			write()
		}
		pos := h.Position()
		for range rng.Intn(60) {
			write()
		}
		var asked []string // nil: every cluster
		if rng.Intn(2) == 0 {
			asked = []string{"c1", "c3", "c4"}
		}
		snap := h.snapshots(pos, asked)
		read := asked
		if read == nil {
			read = clusters
		}
		for _, i := range rng.Perm(len(read)) {
			cl := read[i]
			n := rng.Intn(30)
			if maxEvents > 1024 && rng.Intn(3) == 0 {
				n = 1100
			}
			for range n {
				write()
			}
			got, err := snap.read(cl)
			want, wantErr := h.Snapshot(pos, []string{cl})
			if (err == nil) != (wantErr == nil) {
				t.Fatalf("seed %d, %s: read %v, Snapshot %v", seed, cl, err, wantErr)
			}
			if err == nil && !reflect.DeepEqual(byKey(got), byKey(want)) {
				t.Fatalf("seed %d, %s: read %v, Snapshot %v", seed, cl, byKey(got), byKey(want))
			}
			if reads++; err != nil {
				gone++
				break // the watch ends there
			}
			if _, kept := snap.before[cl]; kept {
				t.Fatalf("seed %d: %s's earlier states kept after its read", seed, cl)
			}
			if _, err := snap.read(cl); err == nil {
				t.Fatalf("seed %d, %s read twice: no error", seed, cl)
			}
		}
		if asked != nil {
			if _, err := snap.read("c0"); err == nil {
				t.Fatalf("seed %d: a cluster not asked for read: no error", seed)
			}
		}
		for cl := range snap.before {
			if snap.done.Has(cl) {
				t.Fatalf("seed %d: earlier states of %s, read already, kept", seed, cl)
			}
		}
		if len(h.ring) > 1024 {
			grown++
		}
	}
	if handoffs == 0 || overflows == 0 || grown == 0 {
		t.Errorf("handoffs %d, epoch resets %d, rings grown %d: a case the histories did not test", handoffs, overflows, grown)
	}
	if gone == 0 || gone > reads/2 {
		t.Errorf("%d of %d reads Gone: the histories test too little of one case", gone, reads)
	}
}

// TestCachePrunesClustersThatLeft: the per-cluster positions of evictions and handoffs stay
// bounded by the clusters present, however many clusters passed through; a position before
// what was pruned is gone for every cluster, and one after it still resumes.
func TestCachePrunesClustersThatLeft(t *testing.T) {
	h := newTestCache(8, 1<<30)
	h.OnAdd("stay", cmAt("s", "1"), true)
	h.OnListed("stay")
	old := h.Position()
	for i := range 1000 {
		cl := "gone-" + strconv.Itoa(i)
		obj := cmAt("x", strconv.Itoa(i))
		h.OnAdd(cl, obj, true)
		h.OnListed(cl)
		if i%2 == 0 {
			h.OnDelete(cl, obj)
			h.OnLeft(cl)
		} else {
			h.OnHandoff(cl) // moved away: cut
		}
	}
	h.mu.Lock()
	kept, present := len(h.evicted)+len(h.cut), len(h.listed)+len(h.latest)
	_, stayKept := h.evicted["stay"]
	h.mu.Unlock()
	if bound := 2*present + 64 + 1; kept > bound {
		t.Errorf("after 1,000 clusters came and went: %d entries of evicted and cut, want at most %d (2 × the %d present + 64)", kept, bound, present)
	}
	if !stayKept {
		t.Error("the eviction of a cluster still present was pruned")
	}
	if _, _, err := h.Next(old, []string{"stay"}, make([]Event, 0, 10)); !IsGone(err) {
		t.Errorf("a watch of a present cluster from before the pruned entries: %v, want Gone", err)
	}
	if _, _, err := h.Next(h.Position(), []string{"stay"}, make([]Event, 0, 10)); err != nil {
		t.Errorf("a watch from the newest position: %v", err)
	}
}
