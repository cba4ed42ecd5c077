package index

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/checker"
	"github.com/google/cel-go/common/types"
	lru "github.com/hashicorp/golang-lru/v2"
)

// FilterCostLimit bounds one evaluation of a filter, as kube-apiserver bounds one CEL
// expression of a ValidatingAdmissionPolicy (its per-call limit, 1,000,000 cost units).
const FilterCostLimit = 1_000_000

// FilterRequestBudget bounds the evaluations of one request together: a filter of modest cost
// over millions of objects stays inside it (10 units each over 2M objects is 20M), one that
// nears the per-call limit on every object does not run for minutes. Where evaluations run
// without their cost tracked (below), the budget counts the tracked cost of one in
// costSample at random, times costSample.
const FilterRequestBudget = 200_000_000

// costSample: of a request's evaluations that need no cost tracking for the limit, one in
// costSample at random is tracked all the same, to count against the request's budget. At
// random rather than by a shared count: concurrent evaluations of a request share nothing
// they write until one is tracked.
const costSample = 64

// maxTrackedReads bounds the values a tracked evaluation reads: seconds of work at most (2.6 s
// in TestFilterTrackedReadsAreBounded, whose reads each convert a container whole).
const maxTrackedReads = 2 * FilterCostLimit

// sizeBounds are the bounds a filter's cost is estimated at, largest first (Filter.bound).
var sizeBounds = []int{65536, 16384, 4096, 1024, 256, 64}

// Filter is a compiled `where` expression: CEL over `object` (the object as JSON-like data, as
// in Kubernetes' CEL) whose value is a bool. Use Bind for each request: a Bound filter
// remembers why an evaluation failed, which a request answers as a 400.
//
// Tracking an evaluation's cost takes more time than most evaluations do, so a filter has two
// programs. CEL estimates at compile time the most an expression can cost when no string,
// list or map it reads is larger than a bound: its loops, calls and the values it makes. The
// estimate counts a field read of a dynamic value (all of `object` is) as free, where it costs
// 1 at run time, so the views count those reads themselves (evalState.work). bound is the
// largest of sizeBounds at which the estimate is within half of FilterCostLimit; an evaluation
// of fast whose every value read is within bound, and which reads at most half the limit's
// worth of values, therefore stays within the limit untracked. One that meets a larger value,
// or reads more, runs again as prg, tracked and stopped at the limit
// (TestFilterUntrackedStaysWithinTheLimit, TestFilterFastPath). Both are planned with CEL's
// OptOptimize, which folds constants and compiles a constant regular expression once (a
// `matches` evaluation: 10 times faster, BenchmarkIndexFuncs).
type Filter struct {
	expr  string
	prg   cel.Program // cost tracked, stopped at FilterCostLimit
	fast  cel.Program // cost not tracked; nil when no bound keeps the estimate within the limit
	bound int
	// native is fast planned into Go closures (nativeProgram), nil where fast is nil or
	// the expression uses what it does not plan. An evaluation it bails on runs fast.
	native *nativeProgram
}

// filters caches compiled filters: a dashboard asks the same question again and again.
var filters, _ = lru.New[string, *Filter](256)

// CompileFilter compiles expr. Its errors name the line and column in the expression (CEL's
// "<input>:1:8"), and refuse an expression whose value cannot be a bool.
func CompileFilter(expr string) (*Filter, error) {
	if f, ok := filters.Get(expr); ok {
		return f, nil
	}
	if strings.TrimSpace(expr) == "" {
		return nil, fmt.Errorf("an expression is required")
	}
	ast, iss := celEnv.Compile(expr)
	if iss.Err() != nil {
		return nil, iss.Err()
	}
	if t := ast.OutputType(); !t.IsExactType(types.BoolType) && !t.IsExactType(types.DynType) {
		return nil, fmt.Errorf("the expression is of type %s, want bool", t)
	}
	prg, err := celEnv.Program(ast, cel.CostLimit(FilterCostLimit), cel.EvalOptions(cel.OptTrackCost, cel.OptOptimize))
	if err != nil {
		return nil, err
	}
	f := &Filter{expr: expr, prg: prg}
	for _, bound := range sizeBounds {
		est, err := celEnv.EstimateCost(ast, sizeEstimator(bound))
		if err != nil || est.Max > FilterCostLimit/2 {
			continue
		}
		if f.fast, err = celEnv.Program(ast, cel.EvalOptions(cel.OptOptimize)); err != nil {
			return nil, err
		}
		f.bound = bound
		f.native, _ = planNative(ast) // nil: the expression uses what it does not plan
		break
	}
	filters.Add(expr, f)
	return f, nil
}

// sizeEstimator estimates every string, list and map CEL does not know the size of at up to
// its value.
type sizeEstimator int

func (e sizeEstimator) EstimateSize(checker.AstNode) *checker.SizeEstimate {
	return &checker.SizeEstimate{Min: 0, Max: uint64(e)}
}

func (sizeEstimator) EstimateCallCost(string, string, *checker.AstNode, []checker.AstNode) *checker.CallEstimate {
	return nil // CEL's own estimate of each function
}

// String is the expression.
func (f *Filter) String() string { return f.expr }

// Bind returns a filter for one request that answers once (a list, a summary): a failure is
// remembered, fails every later evaluation at once, and refuses the request (Err).
func (f *Filter) Bind() *Bound { return &Bound{f: f, once: true, budget: FilterRequestBudget} }

// BindWatch returns a filter for a watch, which judges each event as it comes for as long as
// it runs: an evaluation past the cost limit fails that object alone (it does not pass), and
// no budget adds up over the watch's life.
func (f *Filter) BindWatch() *Bound { return &Bound{f: f} }

// Bound is a Filter in use by one request: safe for concurrent use.
type Bound struct {
	f      *Filter
	once   bool          // a list's or summary's: budget and failures count (Bind)
	budget uint64        // FilterRequestBudget; smaller in tests
	reads  int           // values an untracked evaluation may read: FilterCostLimit/2 if 0 (tests set it)
	spent  atomic.Uint64 // cost of the request's evaluations so far (estimated: costSample)
	failed atomic.Bool   // set with fail: every later evaluation fails at once
	mu     sync.Mutex
	fail   error
}

// Matches reports whether obj passes: the expression is true for it. A field the object does
// not have, or a value that is not a bool, does not pass (as has() would say). An evaluation
// that exceeds the cost limit does not pass either, nor does any after it or after the
// request's budget is spent: the failure is remembered (Err) and the request is refused.
func (b *Bound) Matches(obj any) bool {
	if b.once && b.failed.Load() {
		return false
	}
	charge := uint64(1)
	if b.f.fast != nil {
		if !b.once || rand.Uint64N(costSample) != 0 {
			if pass, ok := b.matchesFast(obj); ok {
				return pass
			}
		} else {
			charge = costSample // this one stands for costSample evaluations
		}
	}
	// Tracked: CEL stops at the limit. CEL prices some reads at less than they take (a list
	// concatenated or a map compared is read whole, at a cost of 1), so the views also stop an
	// evaluation past maxTrackedReads values read: it counts as past the limit.
	st := newEvalState(math.MaxInt, maxTrackedReads)
	defer st.release()
	object, err := objectValue(obj, st)
	if err != nil {
		return false
	}
	st.act.object = object
	val, det, err := b.f.prg.Eval(&st.act)
	cost := uint64(0)
	if det != nil && det.ActualCost() != nil {
		cost = *det.ActualCost()
	}
	if st.over {
		err = fmt.Errorf("read more than %d values: cost limit exceeded", maxTrackedReads)
		cost = FilterCostLimit + 1
	}
	if !b.once {
		return err == nil && val == types.True
	}
	if spent := b.spent.Add(cost * charge); spent > b.budget {
		b.failWith(fmt.Errorf("evaluation cost of this request exceeds its budget of %d", b.budget))
		return false
	}
	if err != nil {
		if strings.Contains(err.Error(), "cost limit exceeded") {
			b.failWith(fmt.Errorf("evaluation cost exceeds the limit of %d (reached %d)", FilterCostLimit, cost))
		}
		return false
	}
	return val == types.True
}

// matchesFast evaluates the untracked program; ok is false when obj holds a value over the
// filter's bound, whose cost the estimate does not cover.
func (b *Bound) matchesFast(obj any) (pass, ok bool) {
	reads := b.reads
	if reads == 0 {
		reads = FilterCostLimit / 2
	}
	st := newEvalState(b.f.bound, reads)
	defer st.release()
	object, err := objectValue(obj, st)
	if err != nil {
		return false, true
	}
	if st.over {
		return false, false
	}
	if b.f.native != nil {
		val, ok := b.f.native.evalIn(&st.frame, object)
		if st.over {
			return false, false
		}
		if ok {
			return val == types.True, true
		}
		// Bailed: cel-go evaluates it, within what is left of the same bound on reads.
	}
	st.act.object = object
	val, _, err := b.f.fast.Eval(&st.act)
	if st.over {
		return false, false
	}
	return err == nil && val == types.True, true
}

func (b *Bound) failWith(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.fail == nil {
		b.fail = err
		b.failed.Store(true)
	}
}

// Expr is the filter's expression.
func (b *Bound) Expr() string { return b.f.expr }

// passes is the values of an object that passes: one slice for all, which no caller changes.
var passes = []string{"true"}

// Values is Matches as the values of a field term: "true" when obj passes. The slice is
// shared: read it, never change it.
func (b *Bound) Values(obj any) []string {
	if b.Matches(obj) {
		return passes[:1:1]
	}
	return nil
}

// Err is why an evaluation failed for good (the cost limit), nil if none did.
func (b *Bound) Err() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.fail
}
