package clusterset

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/watchlist"
)

// How a stack's first list fills its store.
//
// client-go's reflector streams its initial list when the client speaks watch-list (client-go's
// default since 1.35): the API server sends every object as a watch event, then a bookmark that
// ends them, so the client never holds the whole list at once. That bound on memory has a price
// in CPU. On our machine class, 3 API servers streaming 20,000 Pods each to the daemon spent 2.01
// CPU-seconds, against 1.17 for the reflector's plain LIST of the same Pods (resourceVersion
// "0", which each API server answers from its watch cache in one response; docs/BENCHMARKS.md,
// P7, medians of 5). On two cores shared with the API servers, that difference is most of the
// daemon's time to ready.
//
// So a first list that is small enough takes client-go's list path: the stack's ListerWatcher
// declares no watch-list when the reflector asks (plannedListWatch), and the reflector lists as
// informers did before watch-list.
// Its price is memory while it runs: the response and its decoded objects are all held until the
// store has taken them (P7 reports the peak RSS both ways). Two bounds keep that price known:
//   - a list estimated at more than Options.UnpagedListMax objects streams;
//   - at most Options.UnpagedListBudget objects are in first lists listed this way at once,
//     across every cluster and resource, from the estimate until the stack's first sync (or its
//     stop); a list that does not fit streams rather than waits.
//
// The estimate is a LIST with limit 1 (its remainingItemCount), sent when the reflector is
// created, since the reflector decides then, once, whether it streams. A list whose size is
// unknown (a label or field selector: the API server does not count those), or whose estimate
// fails or takes longer than estimateTimeout, streams. A start from a state another replica
// handed over takes no estimate: it streams from that state (handover.go). Later relists are
// the reflector's own, in the way it was built, and outside the budget: a reflector built to
// list relists with a whole LIST from the watch cache (from its last resourceVersion), as
// client-go's informers did before watch-list, however large the resource has grown.

// estimateTimeout bounds the limit-1 LIST a first list is planned on: past it, the list streams.
const estimateTimeout = 30 * time.Second

// DefaultUnpagedListMax and DefaultUnpagedListBudget are Options' defaults. The environment
// variable MULTICACHE_UNPAGED_LIST_MAX, when set, replaces the first (a negative value: every
// list streams), so that a test suite can run either way without code.
const (
	DefaultUnpagedListMax    = 50000
	DefaultUnpagedListBudget = 150000
)

// unpagedListMaxFromEnv is MULTICACHE_UNPAGED_LIST_MAX, or def when it is unset or not a number.
func unpagedListMaxFromEnv(def int) int {
	if v, err := strconv.Atoi(os.Getenv("MULTICACHE_UNPAGED_LIST_MAX")); err == nil && v != 0 {
		return v
	}
	return def
}

// listBudget counts the objects of the unpaged lists under way. Safe for concurrent use.
type listBudget struct {
	mu   sync.Mutex
	free int
}

// reserve takes n objects from the budget, if they fit.
func (b *listBudget) reserve(n int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n > b.free {
		return false
	}
	b.free -= n
	return true
}

func (b *listBudget) give(n int) {
	b.mu.Lock()
	b.free += n
	b.mu.Unlock()
}

// listPlan is how one stack's first list runs.
type listPlan struct {
	// unpaged: the reflector is built without watch-list, so that its first list is its LIST
	// from resourceVersion "0", which a watch cache answers in one response.
	unpaged bool
	// estimate is the count the plan was made on; -1 when unknown.
	estimate int
	// estimated is the limit-1 list the estimate came from, if one was sent: a streamed first
	// list uses it for its progress instead of sending another.
	estimated runtime.Object

	release func() // gives the reserved objects back; idempotent
}

// done gives the plan's reservation back; safe to call more than once, and on a nil plan.
func (p *listPlan) done() {
	if p != nil && p.release != nil {
		p.release()
	}
}

// countOf is how many objects a limit-1 list says the whole list has: what it returned plus
// its remainingItemCount; -1 when the server did not count (selectors).
func countOf(list runtime.Object) int {
	lm, err := meta.ListAccessor(list)
	if err != nil {
		return -1
	}
	n := meta.LenList(list)
	rem := lm.GetRemainingItemCount()
	switch {
	case rem != nil:
		return n + int(*rem)
	case lm.GetContinue() == "":
		return n // the one page is the whole list
	default:
		return -1
	}
}

// planList estimates the first list of a stack with one limit-1 LIST (list applies the spec's
// selectors), and plans it unpaged when it is at most max objects and they fit budget. A failed
// estimate plans a streamed list: the reflector's own list reports what is wrong.
func planList(ctx context.Context, list func(context.Context, metav1.ListOptions) (runtime.Object, error), max int, budget *listBudget) (*listPlan, error) {
	if max < 0 || budget == nil {
		return &listPlan{estimate: -1}, nil
	}
	out, err := list(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return &listPlan{estimate: -1}, fmt.Errorf("estimate the list's size: %w", err)
	}
	n := countOf(out)
	p := &listPlan{estimate: n, estimated: out}
	if n < 0 || n > max || !budget.reserve(n) {
		return p, nil
	}
	var once sync.Once
	p.unpaged, p.release = true, func() { once.Do(func() { budget.give(n) }) }
	return p, nil
}

// firstList decides, once, how a stack's first list runs: from a state another replica handed
// over, or planned (planList). The decision is taken when client-go's reflector is created,
// which happens when the informer runs, on its goroutine (the reflector then asks its
// ListerWatcher whether it speaks watch-list, through IsWatchListSemanticsUnSupported): so a
// slow answer holds back this stack only. With the WatchListClient feature off the reflector
// never asks: nothing is decided, and it lists.
type firstList struct {
	decide func() (*Handed, *listPlan)

	once   sync.Once
	mu     sync.Mutex
	closed bool      // done was called: a plan decided later gives its reservation back at once
	handed *Handed   // until takeHanded: the whole handed state, not to be kept longer
	plan   *listPlan // nil until decided (decide never returns a nil plan)
}

// get decides, if that has not happened yet, and returns the plan.
func (f *firstList) get() *listPlan {
	f.once.Do(func() {
		h, p := f.decide()
		f.mu.Lock()
		f.handed, f.plan = h, p
		closed := f.closed
		f.mu.Unlock()
		if closed {
			p.done()
		}
	})
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.plan
}

// takeHanded decides, if that has not happened yet, and hands out the state taken over, once:
// the stack's store takes its objects, and nothing here keeps them.
func (f *firstList) takeHanded() *Handed {
	f.get()
	f.mu.Lock()
	defer f.mu.Unlock()
	h := f.handed
	f.handed = nil
	return h
}

// planned is the plan, once decided; nil before (or when never decided).
func (f *firstList) planned() *listPlan {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.plan
}

// estimated is the limit-1 list the plan was made on, if any.
func (f *firstList) estimated() runtime.Object {
	if p := f.planned(); p != nil {
		return p.estimated
	}
	return nil
}

// done gives back what the plan reserved, now or, if it is still being decided, as soon as it
// is; safe on a nil firstList and more than once.
func (f *firstList) done() {
	if f == nil {
		return
	}
	f.mu.Lock()
	f.closed = true
	p := f.plan
	f.mu.Unlock()
	p.done()
}

// listerWatcher is lw, declaring watch-list as client does (cache.ToListWatcherWithWatchListSemantics)
// unless the first list is planned as a LIST.
func (f *firstList) listerWatcher(lw *cache.ListWatch, client any) cache.ListerWatcher {
	return &plannedListWatch{ListWatch: lw, first: f, clientRefuses: watchlist.DoesClientNotSupportWatchListSemantics(client)}
}

type plannedListWatch struct {
	*cache.ListWatch
	first         *firstList
	clientRefuses bool
}

// IsWatchListSemanticsUnSupported is what client-go's reflector asks when it is created.
func (lw *plannedListWatch) IsWatchListSemanticsUnSupported() bool {
	if lw.clientRefuses {
		return true
	}
	return lw.first.get().unpaged
}
