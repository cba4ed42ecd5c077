package aggregate

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/util/workqueue"
)

// TestQueueKeysWorkqueue: keys of every change reach client-go's typed rate-limiting queue; a
// worker reads the current state by key; a failed reconcile is retried, then forgotten.
func TestQueueKeysWorkqueue(t *testing.T) {
	a := newAgg(t)
	c1 := newCluster("c1", 5, 0)
	c2 := newCluster("c2", 5, 100)
	i1, _ := startInformer(t, c1.source())
	i2, _ := startInformer(t, c2.source())
	_ = a.join("c1", i1)
	_ = a.join("c2", i2)
	q := workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[Key](time.Millisecond, 10*time.Millisecond))
	defer q.ShutDown()
	if _, err := a.AddEventHandler(QueueKeys(q)); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[Key]string{} // last state a worker saw: uid/rv, or "gone"
	failed := map[Key]bool{}
	go func() {
		for {
			k, shutdown := q.Get()
			if shutdown {
				return
			}
			obj, exists, err := a.Get(k)
			mu.Lock()
			switch {
			case err != nil:
				t.Errorf("Get(%s): %v", k, err)
			case k.Name == "o1" && !failed[k]:
				failed[k] = true // the first attempt fails: retried with backoff
				q.AddRateLimited(k)
			case !exists:
				seen[k] = "gone"
				q.Forget(k)
			default:
				seen[k] = stateOf(obj)
				q.Forget(k)
			}
			mu.Unlock()
			q.Done(k)
		}
	}()
	for range 300 {
		c1.step()
		c2.step()
	}
	want := map[Key]string{}
	for _, c := range []*cluster{c1, c2} {
		for k, v := range c.truth() {
			key, _ := ParseKey(k)
			want[key] = v
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		bad := []string{}
		for k, v := range want {
			if seen[k] != v {
				bad = append(bad, fmt.Sprintf("%s: want %s, worker saw %q", k, v, seen[k]))
			}
		}
		for k, v := range seen {
			if _, ok := want[k]; !ok && v != "gone" {
				bad = append(bad, fmt.Sprintf("%s: deleted, worker saw %s", k, v))
			}
		}
		retried := len(failed)
		mu.Unlock()
		if len(bad) == 0 && q.Len() == 0 {
			if retried != 2 {
				t.Errorf("%d keys failed once and were retried, want 2 (o1 in each cluster)", retried)
			}
			return
		}
		if time.Now().After(deadline) {
			sort.Strings(bad)
			t.Fatalf("workers did not reach the clusters' state: %v", bad[:min(5, len(bad))])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestResyncSpreadsClusters: a handler's resync replays every object as an update, one
// cluster at a time, the clusters at different moments of the period.
func TestResyncSpreadsClusters(t *testing.T) {
	a := newAgg(t)
	for i, name := range []string{"c1", "c2", "c3"} {
		c := newCluster(name, 4, i*100)
		inf, _ := startInformer(t, c.source())
		_ = a.join(name, inf)
	}
	a.WaitForSync(context.Background(), 5*time.Second)
	var mu sync.Mutex
	at := map[string][]time.Time{}
	updates := map[string]int{}
	reg, err := a.AddEventHandlerWithOptions(HandlerFuncs{UpdateFunc: func(c string, old, obj any) {
		if old != obj {
			t.Errorf("resync update with different objects")
		}
		mu.Lock()
		at[c] = append(at[c], time.Now())
		updates[keyIn(c, obj)]++
		mu.Unlock()
	}}, HandlerOptions{ResyncPeriod: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Remove()
	if _, err := a.AddEventHandlerWithOptions(HandlerFuncs{}, HandlerOptions{ResyncPeriod: time.Millisecond}); err == nil {
		t.Error("a resync period under a second accepted")
	}
	waitTrue(t, "every object resynced", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(updates) == 12
	})
	time.Sleep(100 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	var firsts []time.Time
	for _, c := range []string{"c1", "c2", "c3"} {
		// One period's replay: c1's next one is due 500 ms after c3's first, which a stalled
		// test may reach before it reads these.
		var ts []time.Time
		for _, ti := range at[c] {
			if ti.Sub(at[c][0]) < 750*time.Millisecond {
				ts = append(ts, ti)
			}
		}
		if len(ts) != 4 || ts[3].Sub(ts[0]) > 100*time.Millisecond {
			t.Errorf("cluster %s replayed %d objects over %s: want its 4 together", c, len(ts), ts[len(ts)-1].Sub(ts[0]))
		}
		firsts = append(firsts, ts[0])
	}
	sort.Slice(firsts, func(i, j int) bool { return firsts[i].Before(firsts[j]) })
	for i := 1; i < len(firsts); i++ {
		if gap := firsts[i].Sub(firsts[i-1]); gap < 200*time.Millisecond {
			t.Errorf("clusters replayed %s apart, want them spread over the period (about 500 ms apart)", gap)
		}
	}
}
