package index

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	lru "github.com/hashicorp/golang-lru/v2"
)

// FilterCostLimit bounds one evaluation of a filter, as kube-apiserver bounds one CEL
// expression of a ValidatingAdmissionPolicy (its per-call limit, 1,000,000 cost units).
const FilterCostLimit = 1_000_000

// FilterRequestBudget bounds the evaluations of one request together: a filter of modest cost
// over millions of objects stays inside it (10 units each over 2M objects is 20M), one that
// nears the per-call limit on every object does not run for minutes.
const FilterRequestBudget = 200_000_000

// Filter is a compiled `where` expression: CEL over `object` (the object as JSON-like data, as
// in Kubernetes' CEL) whose value is a bool. Use Bind for each request: a Bound filter
// remembers why an evaluation failed, which a request answers as a 400.
type Filter struct {
	expr   string
	prg    cel.Program
	fields []string
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
	prg, err := celEnv.Program(ast, cel.CostLimit(FilterCostLimit), cel.EvalOptions(cel.OptTrackCost))
	if err != nil {
		return nil, err
	}
	f := &Filter{expr: expr, prg: prg, fields: topLevelFields(ast.NativeRep().Expr())}
	filters.Add(expr, f)
	return f, nil
}

// String is the expression.
func (f *Filter) String() string { return f.expr }

// Bind returns a filter for one request that answers once (a list, a summary): a failure is
// remembered, fails every later evaluation at once, and refuses the request (Err).
func (f *Filter) Bind() *Bound { return &Bound{f: f, once: true} }

// BindWatch returns a filter for a watch, which judges each event as it comes for as long as
// it runs: an evaluation past the cost limit fails that object alone (it does not pass), and
// no budget adds up over the watch's life.
func (f *Filter) BindWatch() *Bound { return &Bound{f: f} }

// Bound is a Filter in use by one request: safe for concurrent use.
type Bound struct {
	f      *Filter
	once   bool          // a list's or summary's: budget and failures count (Bind)
	spent  atomic.Uint64 // cost of the request's evaluations so far
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
	data, err := objectData(obj, b.f.fields)
	if err != nil {
		return false
	}
	val, det, err := b.f.prg.Eval(map[string]any{"object": data})
	cost := uint64(0)
	if det != nil && det.ActualCost() != nil {
		cost = *det.ActualCost()
	}
	if !b.once {
		return err == nil && val.Value() == true
	}
	if spent := b.spent.Add(cost); spent > FilterRequestBudget {
		b.failWith(fmt.Errorf("evaluation cost of this request exceeds its budget of %d", FilterRequestBudget))
		return false
	}
	if err != nil {
		if strings.Contains(err.Error(), "cost limit exceeded") {
			b.failWith(fmt.Errorf("evaluation cost exceeds the limit of %d (reached %d)", FilterCostLimit, cost))
		}
		return false
	}
	pass, ok := val.Value().(bool)
	return ok && pass
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

// Values is Matches as the values of a field term: "true" when obj passes.
func (b *Bound) Values(obj any) []string {
	if b.Matches(obj) {
		return []string{"true"}
	}
	return nil
}

// Err is why an evaluation failed for good (the cost limit), nil if none did.
func (b *Bound) Err() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.fail
}
