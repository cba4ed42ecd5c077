package index

import (
	"fmt"
	"strings"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	lru "github.com/hashicorp/golang-lru/v2"
)

// FilterCostLimit bounds one evaluation of a filter, as kube-apiserver bounds one CEL
// expression of a ValidatingAdmissionPolicy (its per-call limit, 1,000,000 cost units).
const FilterCostLimit = 1_000_000

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

// Bind returns a filter for one request.
func (f *Filter) Bind() *Bound { return &Bound{f: f} }

// Bound is a Filter in use by one request: safe for concurrent use.
type Bound struct {
	f    *Filter
	mu   sync.Mutex
	fail error
}

// Matches reports whether obj passes: the expression is true for it. A field the object does
// not have, or a value that is not a bool, does not pass (as has() would say). An evaluation
// that exceeds the cost limit does not pass either, and is remembered (Err).
func (b *Bound) Matches(obj any) bool {
	data, err := objectData(obj, b.f.fields)
	if err != nil {
		return false
	}
	val, det, err := b.f.prg.Eval(map[string]any{"object": data})
	if err != nil {
		if strings.Contains(err.Error(), "cost limit exceeded") {
			b.mu.Lock()
			if b.fail == nil {
				cost := uint64(0)
				if det != nil && det.ActualCost() != nil {
					cost = *det.ActualCost()
				}
				b.fail = fmt.Errorf("evaluation cost exceeds the limit of %d (reached %d)", FilterCostLimit, cost)
			}
			b.mu.Unlock()
		}
		return false
	}
	pass, ok := val.Value().(bool)
	return ok && pass
}

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
