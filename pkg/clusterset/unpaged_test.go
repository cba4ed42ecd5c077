package clusterset

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

func TestPlanList(t *testing.T) {
	var asked []metav1.ListOptions
	counting := func(l runtime.Object, err error) func(context.Context, metav1.ListOptions) (runtime.Object, error) {
		return func(_ context.Context, o metav1.ListOptions) (runtime.Object, error) {
			asked = append(asked, o)
			return l, err
		}
	}
	ctx := context.Background()
	budget := &listBudget{free: 100}

	// 60 objects (1 + remainingItemCount 59): at most max, and they fit the budget.
	p1, err := planList(ctx, counting(cmList(1, "c", ptr.To(int64(59))), nil), 80, budget)
	if err != nil || !p1.unpaged || p1.estimate != 60 || budget.free != 40 {
		t.Fatalf("60 objects: plan %+v, err %v, budget left %d; want unpaged, 60, 40 left", p1, err, budget.free)
	}
	if len(asked) != 1 || asked[0].Limit != 1 {
		t.Fatalf("the estimate asked %+v; want one list with limit 1", asked)
	}
	// 50 more do not fit the 40 left: streamed, nothing reserved.
	p2, _ := planList(ctx, counting(cmList(1, "c", ptr.To(int64(49))), nil), 80, budget)
	if p2.unpaged || p2.estimate != 50 || budget.free != 40 {
		t.Fatalf("50 objects with 40 left: plan %+v, budget left %d; want streamed, nothing reserved", p2, budget.free)
	}
	// Giving back is idempotent.
	p1.done()
	p1.done()
	if budget.free != 100 {
		t.Fatalf("after the first plan is done twice: budget %d; want 100", budget.free)
	}
	// More than max: streamed even though the budget has room.
	if p, _ := planList(ctx, counting(cmList(1, "c", ptr.To(int64(80))), nil), 80, budget); p.unpaged || p.estimate != 81 {
		t.Fatalf("81 objects, max 80: plan %+v; want streamed", p)
	}
	// A one-page list is its own count.
	if p, _ := planList(ctx, counting(cmList(1, "", nil), nil), 80, budget); !p.unpaged || p.estimate != 1 {
		t.Fatalf("a list of one object: plan %+v; want unpaged, 1", p)
	}
	// More pages and no count (a selector): unknown, streamed.
	if p, _ := planList(ctx, counting(cmList(1, "c", nil), nil), 80, budget); p.unpaged || p.estimate != -1 {
		t.Fatalf("an uncounted list: plan %+v; want streamed, -1", p)
	}
	// A failed estimate: streamed, and the error says what failed.
	if p, err := planList(ctx, counting(nil, errors.New("boom")), 80, budget); p.unpaged || err == nil {
		t.Fatalf("a failed estimate: plan %+v, err %v; want streamed and an error", p, err)
	}
	// Max negative: no estimate is sent at all.
	n := len(asked)
	if p, _ := planList(ctx, counting(cmList(1, "", nil), nil), -1, budget); p.unpaged || len(asked) != n {
		t.Fatalf("max -1: plan %+v, %d requests; want streamed and none", p, len(asked)-n)
	}
}

func TestFirstList(t *testing.T) {
	budget := &listBudget{free: 10}
	reserve := func() *listPlan {
		p, _ := planList(context.Background(), func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			return cmList(1, "c", ptr.To(int64(9))), nil
		}, 10, budget)
		return p
	}
	// Decided once, however often asked; done gives the reservation back, once.
	calls := 0
	f := &firstList{decide: func() (*Handed, *listPlan) { calls++; return nil, reserve() }}
	if f.planned() != nil || f.estimated() != nil {
		t.Fatal("a plan before anything asked for one")
	}
	if first, again := f.get(), f.get(); !first.unpaged || again != first || calls != 1 || budget.free != 0 {
		t.Fatalf("decisions %d, budget %d; want one unpaged plan holding all 10", calls, budget.free)
	}
	if f.estimated() == nil {
		t.Fatal("a decided plan without the list it was estimated on")
	}
	f.done()
	f.done()
	if budget.free != 10 {
		t.Fatalf("after done: budget %d, want 10", budget.free)
	}

	// done while undecided (the stack stopped): a later decision gives its reservation back.
	f = &firstList{decide: func() (*Handed, *listPlan) { return nil, reserve() }}
	f.done()
	f.get()
	if budget.free != 10 {
		t.Fatalf("a plan decided after done: budget %d, want 10", budget.free)
	}

	// A handed state is handed out once, and not kept.
	h := &Handed{Key: "k", ResourceVersion: "42"}
	f = &firstList{decide: func() (*Handed, *listPlan) { return h, &listPlan{estimate: -1} }}
	if f.get().unpaged {
		t.Fatal("a start from a handed state must stream")
	}
	if got := f.takeHanded(); got != h {
		t.Fatalf("takeHanded: %v, want the handed state", got)
	}
	if got := f.takeHanded(); got != nil {
		t.Fatalf("takeHanded again: %v, want nil (given out once)", got)
	}
	var nilFirst *firstList
	nilFirst.done() // a stack that never built one
}

// TestReflectorFollowsThePlan runs client-go's own reflector over listWatch: an unpaged plan
// lists once, from resourceVersion "0", and never streams; a streamed plan opens a watch with
// initial events and sends no list.
func TestReflectorFollowsThePlan(t *testing.T) {
	for _, unpaged := range []bool{true, false} {
		t.Run(map[bool]string{true: "unpaged", false: "streamed"}[unpaged], func(t *testing.T) {
			var mu sync.Mutex
			var lists, watches []metav1.ListOptions
			listed := cmList(3, "", nil)
			listed.ResourceVersion = "7"
			list := func(_ context.Context, o metav1.ListOptions) (runtime.Object, error) {
				mu.Lock()
				defer mu.Unlock()
				lists = append(lists, o)
				return listed.DeepCopy(), nil
			}
			watchFn := func(_ context.Context, o metav1.ListOptions) (watch.Interface, error) {
				mu.Lock()
				defer mu.Unlock()
				watches = append(watches, o)
				return watch.NewFake(), nil
			}
			// 3 objects: unpaged with max 10, streamed with max 2. A streamed plan's estimate
			// is its progress's too, so that the first stream sends no list of its own. The
			// plan is made when the reflector is created, not before.
			max := map[bool]int{true: 10, false: 2}[unpaged]
			estimates := 0
			first := &firstList{decide: func() (*Handed, *listPlan) {
				plan, _ := planList(context.Background(), func(context.Context, metav1.ListOptions) (runtime.Object, error) {
					estimates++
					return cmList(3, "", nil), nil
				}, max, &listBudget{free: 3})
				return nil, plan
			}}
			var p progress
			lw := listWatch(ResourceSpec{Name: "configmaps"}, &p, nil, list, watchFn, func(context.Context, error) {}, first)
			if estimates != 0 {
				t.Fatalf("%d estimates before the reflector exists; want none", estimates)
			}
			store := cache.NewStore(cache.MetaNamespaceKeyFunc)
			r := cache.NewReflector(lw, &corev1.ConfigMap{}, store, 0)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); r.RunWithContext(ctx) }()
			deadline := time.Now().Add(10 * time.Second)
			for {
				mu.Lock()
				n := len(watches)
				mu.Unlock()
				if n > 0 || time.Now().After(deadline) {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			cancel()
			<-done
			mu.Lock()
			defer mu.Unlock()
			if len(watches) == 0 {
				t.Fatal("the reflector opened no watch in 10s")
			}
			if estimates != 1 {
				t.Fatalf("%d estimates; want 1", estimates)
			}
			streamed := watches[0].SendInitialEvents != nil && *watches[0].SendInitialEvents
			if unpaged {
				if len(lists) != 1 || lists[0].ResourceVersion != "0" || streamed {
					t.Fatalf("lists %+v, first watch %+v; want one list from \"0\" and a plain watch", lists, watches[0])
				}
				if len(store.List()) != 3 || watches[0].ResourceVersion != "7" {
					t.Fatalf("store %d objects, watch from %q; want 3 and the list's \"7\"", len(store.List()), watches[0].ResourceVersion)
				}
				return
			}
			if len(lists) != 0 || !streamed {
				t.Fatalf("lists %+v, first watch %+v; want no list and a watch with initial events", lists, watches[0])
			}
			if got := p.snapshot(); got.Expected != 3 {
				t.Fatalf("progress %+v; want the plan's estimate, 3, expected", got)
			}
		})
	}
}
