package clusterset

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// How a stack's first list fills its store.
//
// client-go's reflector streams its initial list when the client speaks watch-list: the API
// server sends every object as a watch event and a bookmark that ends them, so the client never
// holds the whole list at once. That bound on memory has a price in CPU: on our machine class,
// 3 API servers streaming 20,000 Pods each spent 2.3–2.7 CPU-seconds, against 1.1 for one
// unpaged LIST of the same Pods from their watch caches (docs/BENCHMARKS.md, P7). On two cores
// shared with the API servers, that difference is most of the daemon's time to ready.
//
// So a list that is small enough is fetched the way informers fetched before watch-list: one
// LIST with resourceVersion "0" and no limit, which the API server answers from its watch
// cache in one response. Its price is memory while it runs: the response and its decoded
// objects are held together until the store has taken them (P7 reports the peak RSS of both
// ways). Two bounds keep that price known:
//   - a list estimated at more than Options.UnpagedListMax objects streams;
//   - at most Options.UnpagedListBudget objects are being fetched unpaged at once, across every
//     cluster and resource; a list that does not fit streams rather than waits.
//
// The estimate is a LIST with limit 1 (its remainingItemCount), sent before the reflector is
// built, since the reflector decides once whether it streams. A list whose size is unknown (a
// label or field selector: the API server does not count those) streams. A start from a state
// another replica handed over takes no estimate: it streams from that state (handover.go).
// Later relists are the reflector's own: streamed, or paged as client-go pages them.

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
	// unpaged: the first list is one LIST with no limit, served from the watch cache; the
	// reflector does not stream.
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

// unpagedFirst makes the first list request of a reflector one unpaged LIST: the reflector asks
// with resourceVersion "0" and a page limit, which API servers since 1.34 serve page by page
// from snapshots of their watch cache (the ListFromCacheSnapshot feature). Without the limit it
// is one response from that cache.
// The plan's reservation is given back when that request returns: the objects are then in the
// reflector's hands, which store them at once.
func unpagedFirst(plan *listPlan, list func(context.Context, metav1.ListOptions) (runtime.Object, error)) func(context.Context, metav1.ListOptions) (runtime.Object, error) {
	var first sync.Once
	return func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		isFirst := false
		if o.Continue == "" && o.ResourceVersion == "0" {
			first.Do(func() { isFirst = true })
		}
		if !isFirst {
			return list(ctx, o)
		}
		defer plan.done()
		o.Limit = 0
		return list(ctx, o)
	}
}

// noWatchList declares a client that does not speak watch-list, so that client-go's reflector
// lists (see watchlist.DoesClientNotSupportWatchListSemantics).
type noWatchList struct{}

func (noWatchList) IsWatchListSemanticsUnSupported() bool { return true }
