package index

import (
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"sync"

	"github.com/google/cel-go/cel"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/functions"
	"github.com/google/cel-go/common/operators"
	"github.com/google/cel-go/common/overloads"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
)

// A filter is mostly a few field reads, a comparison and an exists() over a list; cel-go's
// interpreter spends about two thirds of such an evaluation on its own machinery: attribute
// resolution, qualifiers, activations, dispatch checks. nativeProgram is the same checked
// expression planned into Go closures over the same views, for the part of CEL filters use.
//
// It follows cel-go's own plan node for node (interpreter/planner.go and interpretable.go):
// the same order of evaluation, the same strictness (an error or unknown argument is the
// call's value), the same short-circuits, the same function implementations (the
// environment's own bindings, with their runtime type guards), the same comprehension loop
// (a loop condition that is a bool and not true ends it; a list accumulator starts mutable),
// and what cel-go's OptOptimize changes: `in` against a list of literals as a set, `matches`
// with a literal pattern compiled once.
// It therefore reads what cel-go reads, never more, and an untracked evaluation stays within
// the bound CompileFilter estimated for cel-go's program.
//
// What it does not plan (map and struct literals, type names, optionals, two-variable
// comprehensions, functions without bindings) leaves the filter on cel-go's program alone.
// What it meets at run time and does not model as cel-go does (a call that would dispatch
// to a receiver, an unknown value, a panic) marks the evaluation bailed: its value is not
// used, and cel-go evaluates the object instead (TestNativeProgramMatchesCEL, FuzzCELView,
// TestNativeFilterFallsBack).

// nexpr is one planned expression node.
type nexpr func(*nframe) ref.Val

// nframe is one evaluation's variables: `object` and the comprehension variables by slot.
type nframe struct {
	object ref.Val
	vars   []ref.Val
	bailed bool
}

// bail marks the evaluation as not to be trusted; the error it returns flows as any error
// would, and the caller evaluates with cel-go instead.
func (fr *nframe) bail() ref.Val {
	fr.bailed = true
	return errBailed
}

var errBailed = types.NewErr("not evaluated natively")

// nativeProgram is a planned expression; safe for concurrent use.
type nativeProgram struct {
	root  nexpr
	slots int
}

var nframes = sync.Pool{New: func() any { return new(nframe) }}

// eval evaluates p with object bound; ok is false when the evaluation bailed and its value
// means nothing. A panic in a value's method bails too (cel-go's Eval recovers one as an
// error, and then answers for the object).
func (p *nativeProgram) eval(object ref.Val) (val ref.Val, ok bool) {
	fr := nframes.Get().(*nframe)
	defer nframes.Put(fr)
	return p.evalIn(fr, object)
}

// evalIn is eval in the frame fr, which it leaves empty for the next evaluation: an
// evaluation state's own (evalState.frame), which the pool that holds the state keeps.
func (p *nativeProgram) evalIn(fr *nframe, object ref.Val) (val ref.Val, ok bool) {
	fr.object, fr.bailed = object, false
	if cap(fr.vars) < p.slots {
		fr.vars = make([]ref.Val, p.slots)
	}
	fr.vars = fr.vars[:p.slots]
	defer func() {
		if recover() != nil {
			val, ok = errBailed, false
		}
		clear(fr.vars)
		fr.object = nil
	}()
	val = p.root(fr)
	return val, !fr.bailed
}

// celBindings are the environment's function implementations by operator name (a function's
// name, or one overload's id), as cel-go's dispatcher holds them.
var celBindings = sync.OnceValues(func() (map[string]*functions.Overload, error) {
	out := map[string]*functions.Overload{}
	for _, fn := range celEnv.Functions() {
		bindings, err := fn.Bindings()
		if err != nil {
			return nil, err
		}
		for _, o := range bindings {
			out[o.Operator] = o
		}
	}
	return out, nil
})

// planNative plans a checked expression; it returns an error naming what it does not plan.
func planNative(checked *cel.Ast) (*nativeProgram, error) {
	fns, err := celBindings()
	if err != nil {
		return nil, err
	}
	rep := checked.NativeRep()
	p := &nplanner{ast: rep, fns: fns}
	root, err := p.plan(rep.Expr())
	if err != nil {
		return nil, err
	}
	return &nativeProgram{root: root, slots: p.slots}, nil
}

type nplanner struct {
	ast   *celast.AST
	fns   map[string]*functions.Overload
	scope []nlocal // innermost last
	slots int
	// selects are the field selections planned, by expression id: a call on one may read
	// the field's text without making a CEL value of it (stringTestOf).
	selects map[int64]*nselect
}

// nselect is a planned field selection: its operand, and the selection of a value.
type nselect struct {
	op   nexpr
	from func(fr *nframe, v ref.Val) ref.Val // v's field, v being the operand's value
	hint *fieldHint
	key  ref.Val
}

type nlocal struct {
	name string
	slot int
}

func (p *nplanner) push(name string) int {
	slot := p.slots
	p.slots++
	p.scope = append(p.scope, nlocal{name, slot})
	return slot
}

func (p *nplanner) pop(n int) { p.scope = p.scope[:len(p.scope)-n] }

func (p *nplanner) local(name string) (int, bool) {
	for i := len(p.scope) - 1; i >= 0; i-- {
		if p.scope[i].name == name {
			return p.scope[i].slot, true
		}
	}
	return 0, false
}

func (p *nplanner) plan(e celast.Expr) (nexpr, error) {
	switch e.Kind() {
	case celast.LiteralKind:
		v := e.AsLiteral()
		return func(*nframe) ref.Val { return v }, nil
	case celast.IdentKind:
		return p.planIdent(e)
	case celast.SelectKind:
		return p.planSelect(e)
	case celast.CallKind:
		return p.planCall(e)
	case celast.ListKind:
		return p.planList(e)
	case celast.ComprehensionKind:
		return p.planComprehension(e)
	}
	return nil, fmt.Errorf("expression %d: %v is not planned natively", e.ID(), e.Kind())
}

func (p *nplanner) planIdent(e celast.Expr) (nexpr, error) {
	name := e.AsIdent()
	if slot, ok := p.local(name); ok {
		return func(fr *nframe) ref.Val { return fr.vars[slot] }, nil
	}
	if r, ok := p.ast.ReferenceMap()[e.ID()]; name == "object" && (!ok || r.Value == nil) {
		return func(fr *nframe) ref.Val { return fr.object }, nil
	}
	return nil, fmt.Errorf("identifier %q is not planned natively", name)
}

func (p *nplanner) planSelect(e celast.Expr) (nexpr, error) {
	if _, ok := p.ast.ReferenceMap()[e.ID()]; ok {
		return nil, fmt.Errorf("qualified name at %d is not planned natively", e.ID())
	}
	sel := e.AsSelect()
	op, err := p.plan(sel.Operand())
	if err != nil {
		return nil, err
	}
	var key ref.Val = types.String(sel.FieldName()) // an interface once, not per read
	hint := &fieldHint{name: sel.FieldName()}
	// Of the values views hand out, only maps (views and CEL's own) have fields; cel-go's
	// qualifiers (refQualify) answer a field of a list with an error, and of any other value
	// (null, a string...) with an error, or false for has(), as this environment does not
	// enable errors on bad presence tests.
	if sel.IsTestOnly() {
		return func(fr *nframe) ref.Val {
			v := op(fr)
			if types.IsUnknownOrError(v) {
				return v
			}
			switch c := v.(type) {
			case traits.Mapper:
				found, ok := c.Find(key)
				if types.IsError(found) {
					return found
				}
				return types.Bool(ok)
			case traits.Lister:
				return types.NewErr("unsupported index type 'string' in list")
			case traits.Indexer:
				return fr.bail() // a proto message: never handed out by a view
			}
			return types.False
		}, nil
	}
	from := func(fr *nframe, v ref.Val) ref.Val {
		if types.IsUnknownOrError(v) {
			return v
		}
		if sv, ok := v.(*structVal); ok {
			f, ok := sv.findHinted(hint)
			return found(f, ok, key)
		}
		switch c := v.(type) {
		case traits.Mapper:
			return find(c, key)
		case traits.Indexer:
			if _, ok := c.(traits.Lister); !ok {
				return fr.bail() // a proto message: never handed out by a view
			}
		}
		return noSuchKey(key)
	}
	if p.selects == nil {
		p.selects = map[int64]*nselect{}
	}
	p.selects[e.ID()] = &nselect{op: op, from: from, hint: hint, key: key}
	return func(fr *nframe) ref.Val { return from(fr, op(fr)) }, nil
}

// stringTestOf plans a test of a selected field against a literal string (==, !=, startsWith,
// endsWith, contains) that reads the field's text where it is a plain string field of a typed
// object, without making a CEL value of it (which allocates): the same read, spent and
// admitted as a view reads it, and the same answer as test's over the CEL values. Any other
// field is read as a view reads it, and answer (the call's planned form over values) decides.
func (p *nplanner) stringTestOf(args []celast.Expr, test func(s, t string) bool, answer func(fr *nframe, l, r ref.Val) ref.Val) nexpr {
	if len(args) != 2 || args[0].Kind() != celast.SelectKind || args[0].AsSelect().IsTestOnly() ||
		args[1].Kind() != celast.LiteralKind {
		return nil
	}
	lit, ok := args[1].AsLiteral().(types.String)
	sel := p.selects[args[0].ID()]
	if !ok || sel == nil {
		return nil
	}
	r := ref.Val(lit)
	return func(fr *nframe) ref.Val {
		v := sel.op(fr)
		sv, ok := v.(*structVal)
		if !ok {
			return answer(fr, sel.from(fr, v), r)
		}
		fv, vf, err := sv.rawHinted(sel.hint)
		switch {
		case err != nil:
			return answer(fr, err, r)
		case vf == nil:
			return answer(fr, noSuchKey(sel.key), r)
		case fv.Kind() != reflect.String:
			return answer(fr, fieldValue(fv, vf, sv.st), r)
		}
		text := fv.String()
		if !sv.st.admit(len(text)) {
			return answer(fr, sv.st.tooLarge(len(text)), r)
		}
		return types.Bool(test(text, string(lit)))
	}
}

// find is a map's value at key as cel-go's qualifiers read it: Find, and a missing key is an
// error.
func find(m traits.Mapper, key ref.Val) ref.Val {
	v, ok := m.Find(key)
	return found(v, ok, key)
}

// found is what a lookup of key answered (v, ok), as cel-go's qualifiers answer it: an error
// stays the error, and a key not found is a "no such key" error.
func found(v ref.Val, ok bool, key ref.Val) ref.Val {
	switch {
	case types.IsError(v):
		return v
	case !ok:
		return noSuchKey(key)
	}
	return v
}

func (p *nplanner) planList(e celast.Expr) (nexpr, error) {
	l := e.AsList()
	if len(l.OptionalIndices()) > 0 {
		return nil, fmt.Errorf("a list with optional elements is not planned natively")
	}
	elems := make([]nexpr, len(l.Elements()))
	literal := true
	for i, el := range l.Elements() {
		var err error
		if elems[i], err = p.plan(el); err != nil {
			return nil, err
		}
		literal = literal && el.Kind() == celast.LiteralKind
	}
	build := func(fr *nframe) ref.Val {
		vals := make([]ref.Val, 0, len(elems))
		for _, el := range elems {
			v := el(fr)
			if types.IsUnknownOrError(v) {
				return v
			}
			vals = append(vals, v)
		}
		return types.NewRefValList(types.DefaultTypeAdapter, vals)
	}
	if literal {
		v := build(nil) // constant: built once; lists are immutable
		return func(*nframe) ref.Val { return v }, nil
	}
	return build, nil
}

func (p *nplanner) planComprehension(e celast.Expr) (nexpr, error) {
	c := e.AsComprehension()
	if c.HasIterVar2() {
		return nil, fmt.Errorf("a two-variable comprehension is not planned natively")
	}
	// The macros' accumulators start as a literal or an empty list, which cel-go replaces
	// with a mutable one (its folder); nothing else is planned.
	var init ref.Val
	emptyList := false
	switch ai := c.AccuInit(); {
	case ai.Kind() == celast.LiteralKind:
		init = ai.AsLiteral()
	case ai.Kind() == celast.ListKind && len(ai.AsList().Elements()) == 0:
		emptyList = true
	default:
		return nil, fmt.Errorf("a comprehension's accumulator %v is not planned natively", ai.Kind())
	}
	rng, err := p.plan(c.IterRange())
	if err != nil {
		return nil, err
	}
	accu := p.push(c.AccuVar())
	iter := p.push(c.IterVar())
	// rangeOf is the comprehension's range as cel-go's folder takes it.
	rangeOf := func(fr *nframe) (niter, ref.Val) {
		r := rng(fr)
		if types.IsUnknownOrError(r) {
			return niter{}, r
		}
		iterable, ok := r.(traits.Iterable)
		if !ok || !r.Type().HasTrait(traits.IterableType) {
			return niter{}, types.ValOrErr(r, "got '%T', expected iterable type", r)
		}
		return iterOf(iterable), nil
	}
	if pred, decisive, ok := quantifier(c); ok {
		test, err := p.plan(pred)
		if err != nil {
			return nil, err
		}
		p.pop(2)
		return quantify(rangeOf, test, accu, iter, decisive), nil
	}
	cond, err := p.plan(c.LoopCondition())
	if err != nil {
		return nil, err
	}
	step, err := p.plan(c.LoopStep())
	if err != nil {
		return nil, err
	}
	p.pop(1)
	result, err := p.plan(c.Result())
	if err != nil {
		return nil, err
	}
	p.pop(1)
	return func(fr *nframe) ref.Val {
		it, failed := rangeOf(fr)
		if failed != nil {
			return failed
		}
		if emptyList {
			fr.vars[accu] = types.NewMutableList(types.DefaultTypeAdapter)
		} else {
			fr.vars[accu] = init
		}
		for {
			v, ok := it.next()
			if !ok {
				break
			}
			fr.vars[iter] = v
			if b, ok := cond(fr).(types.Bool); ok && b != types.True {
				break
			}
			fr.vars[accu] = step(fr)
		}
		fr.vars[iter] = nil
		res := result(fr)
		if emptyList && !types.IsUnknownOrError(res) {
			if ml, ok := res.(traits.MutableLister); ok {
				res = ml.ToImmutableList()
			}
		}
		return res
	}, nil
}

// niter walks a comprehension's range as cel-go's folder does (HasNext, then Next), a list
// view by index rather than through an iterator: the same reads, each spent as its
// iterator's Next spends it.
type niter struct {
	l  *listVal
	it traits.Iterator
	i  int
}

func iterOf(r traits.Iterable) niter {
	if l, ok := r.(*listVal); ok {
		return niter{l: l}
	}
	return niter{it: r.Iterator()}
}

func (n *niter) next() (ref.Val, bool) {
	if n.l != nil {
		if n.i >= n.l.v.Len() {
			return nil, false
		}
		n.i++
		return n.l.item(n.i - 1), true
	}
	if n.it.HasNext() != types.True {
		return nil, false
	}
	return n.it.Next(), true
}

// quantifier recognizes the comprehension cel-go's exists() and all() macros make
// (parser.makeQuantifier): an accumulator that starts false (exists) or true (all), a loop
// condition of @not_strictly_false(!accu) or @not_strictly_false(accu), a step of accu ||
// pred or accu && pred, and accu as the result. It returns pred and the value that decides
// the macro: true for exists, false for all.
func quantifier(c celast.ComprehensionExpr) (pred celast.Expr, decisive types.Bool, ok bool) {
	accu := c.AccuVar()
	isAccu := func(e celast.Expr) bool { return e.Kind() == celast.IdentKind && e.AsIdent() == accu }
	argsOf := func(e celast.Expr, fn string, n int) ([]celast.Expr, bool) {
		if e.Kind() != celast.CallKind {
			return nil, false
		}
		call := e.AsCall()
		if call.FunctionName() != fn || call.IsMemberFunction() || len(call.Args()) != n {
			return nil, false
		}
		return call.Args(), true
	}
	if c.AccuInit().Kind() != celast.LiteralKind || !isAccu(c.Result()) {
		return nil, false, false
	}
	init, isBool := c.AccuInit().AsLiteral().(types.Bool)
	cond, isCall := argsOf(c.LoopCondition(), operators.NotStrictlyFalse, 1)
	if !isBool || !isCall {
		return nil, false, false
	}
	op := operators.LogicalAnd // all
	if init == types.False {   // exists: the condition negates the accumulator
		if cond, isCall = argsOf(cond[0], operators.LogicalNot, 1); !isCall {
			return nil, false, false
		}
		op = operators.LogicalOr
	}
	step, isCall := argsOf(c.LoopStep(), op, 2)
	if !isCall || !isAccu(cond[0]) || !isAccu(step[0]) {
		return nil, false, false
	}
	return step[1], !init, true
}

// quantify is the loop of an exists() (decisive true) or all() (decisive false), with the
// values and reads of cel-go's comprehension over the macro's condition and step, without
// evaluating them as calls: the accumulator starts as !decisive; each element is read, and
// the loop ends, that element unjudged, once the accumulator is decisive (the condition is
// strictly false); otherwise the accumulator becomes accu || pred (accu && pred for all), as
// logical answers it: decisive when pred is, else the first error, else the other bool.
func quantify(rangeOf func(*nframe) (niter, ref.Val), pred nexpr, accu, iter int, decisive types.Bool) nexpr {
	return func(fr *nframe) ref.Val {
		it, failed := rangeOf(fr)
		if failed != nil {
			return failed
		}
		acc := ref.Val(!decisive)
		fr.vars[accu] = acc
		for {
			v, ok := it.next()
			if !ok {
				break
			}
			fr.vars[iter] = v
			if acc == decisive {
				break
			}
			pv := pred(fr)
			if fr.bailed { // cel-go answers instead, within the reads left: spend none more
				fr.vars[iter] = nil
				return errBailed
			}
			b, isBool := pv.(types.Bool)
			switch {
			case isBool:
				if b == decisive {
					acc = decisive
				}
			case types.IsError(acc):
				// the accumulator's error stands: logical's first
			case types.IsUnknown(pv):
				fr.vars[iter] = nil
				return fr.bail()
			case types.IsError(pv):
				acc = pv
			default:
				acc = types.MaybeNoSuchOverloadErr(pv)
			}
			fr.vars[accu] = acc
		}
		fr.vars[iter] = nil
		return acc
	}
}

func (p *nplanner) planCall(e celast.Expr) (nexpr, error) {
	call := e.AsCall()
	fnName := call.FunctionName()
	info, ok := p.ast.ReferenceMap()[e.ID()]
	if !ok {
		return nil, fmt.Errorf("call %s at %d was not checked", fnName, e.ID())
	}
	var argExprs []celast.Expr
	if call.IsMemberFunction() {
		argExprs = append(argExprs, call.Target())
	}
	argExprs = append(argExprs, call.Args()...)
	args := make([]nexpr, len(argExprs))
	for i, a := range argExprs {
		var err error
		if args[i], err = p.plan(a); err != nil {
			return nil, err
		}
	}
	switch fnName {
	case operators.LogicalAnd:
		return logical(args, types.False), nil
	case operators.LogicalOr:
		return logical(args, types.True), nil
	case operators.Conditional:
		return conditional(args[0], args[1], args[2]), nil
	case operators.Equals:
		if f := p.stringTestOf(argExprs, func(s, t string) bool { return s == t }, equalsOf(false)); f != nil {
			return f, nil
		}
		return equals(args[0], args[1], false), nil
	case operators.NotEquals:
		if f := p.stringTestOf(argExprs, func(s, t string) bool { return s != t }, equalsOf(true)); f != nil {
			return f, nil
		}
		return equals(args[0], args[1], true), nil
	case operators.Index:
		return index(args[0], args[1]), nil
	case operators.OptSelect, operators.OptIndex:
		return nil, fmt.Errorf("%s is not planned natively", fnName)
	}
	if fnName == operators.In && len(info.OverloadIDs) == 1 && info.OverloadIDs[0] == overloads.InList {
		if set, ok := constantSet(argExprs[1]); ok {
			return setMembership(args[0], set), nil
		}
	}
	if fnName == "matches" && len(argExprs) == 2 && argExprs[1].Kind() == celast.LiteralKind {
		if pattern, ok := argExprs[1].AsLiteral().(types.String); ok {
			return matches(args[0], string(pattern))
		}
	}
	// The implementation cel-go's planner takes: the one overload the checker chose, else the
	// function's own dispatch.
	var fn *functions.Overload
	if len(info.OverloadIDs) == 1 {
		fn = p.fns[info.OverloadIDs[0]]
	}
	if fn == nil {
		fn = p.fns[fnName]
	}
	if fn == nil {
		return nil, fmt.Errorf("function %s has no binding", fnName)
	}
	switch {
	case len(args) == 1 && fn.Unary != nil:
		return unary(args[0], fn, unaryFast[fnName]), nil
	case len(args) == 2 && fn.Binary != nil:
		if test := stringTests[fnName]; test != nil {
			if f := p.stringTestOf(argExprs, test, binaryOf(fn, binaryFast[fnName])); f != nil {
				return f, nil
			}
		}
		return binary(args[0], args[1], fn, binaryFast[fnName]), nil
	case len(args) > 0 && fn.Function != nil:
		return varArgs(args, fn), nil
	}
	return nil, fmt.Errorf("function %s has no binding for %d arguments", fnName, len(args))
}

// logical is && (decisive false) or || (decisive true) over terms, as cel-go's evalAnd and
// evalOr: every term is evaluated, a decisive one is the value, then an error, then the other
// bool.
func logical(terms []nexpr, decisive types.Bool) nexpr {
	return func(fr *nframe) ref.Val {
		var err ref.Val
		for _, t := range terms {
			v := t(fr)
			b, ok := v.(types.Bool)
			if ok && b == decisive {
				return decisive
			}
			if !ok && err == nil {
				if types.IsUnknown(v) {
					return fr.bail()
				}
				if types.IsError(v) {
					err = v
				} else {
					err = types.MaybeNoSuchOverloadErr(v)
				}
			}
		}
		if err != nil {
			return err
		}
		return !decisive
	}
}

func conditional(cond, t, f nexpr) nexpr {
	return func(fr *nframe) ref.Val {
		switch c := cond(fr); c {
		case types.True:
			return t(fr)
		case types.False:
			return f(fr)
		default:
			if types.IsUnknown(c) {
				return fr.bail()
			}
			return types.MaybeNoSuchOverloadErr(c)
		}
	}
}

func equals(lhs, rhs nexpr, negate bool) nexpr {
	answer := equalsOf(negate)
	return func(fr *nframe) ref.Val { return answer(fr, lhs(fr), rhs(fr)) }
}

// equalsOf is == (or != when negate) over its operands' values, as cel-go's evalEq and evalNe.
func equalsOf(negate bool) func(fr *nframe, l, r ref.Val) ref.Val {
	return func(_ *nframe, l, r ref.Val) ref.Val {
		if types.IsUnknownOrError(l) {
			return l
		}
		if types.IsUnknownOrError(r) {
			return r
		}
		eq := types.Equal(l, r)
		if negate {
			return types.Bool(eq != types.True)
		}
		return eq
	}
}

// index is op[key] as cel-go's qualifiers read it from a map or a list.
func index(op, key nexpr) nexpr {
	return func(fr *nframe) ref.Val {
		v := op(fr)
		if types.IsUnknownOrError(v) {
			return v
		}
		k := key(fr)
		if types.IsUnknownOrError(k) {
			return k
		}
		switch k.(type) {
		case types.String, types.Int, types.Uint, types.Bool, types.Double:
		default:
			// cel-go makes a qualifier of the key before it reads the operand, and has none
			// for any other type (newQualifier).
			return types.NewErr("invalid qualifier type: %T", k)
		}
		switch c := v.(type) {
		case traits.Mapper:
			return find(c, k)
		case traits.Lister:
			i, err := types.IndexOrError(k)
			if err != nil {
				return types.WrapErr(err)
			}
			if i >= 0 && types.Int(i) < c.Size().(types.Int) {
				return c.Get(k)
			}
			return types.NewErr("index out of range: %v", k)
		case traits.Indexer:
			return fr.bail() // a proto message: never handed out by a view
		}
		return noSuchKey(k) // as refQualify answers an index into any other value
	}
}

// constantSet is the set cel-go's OptOptimize makes of a list of literals that `in` tests
// against (maybeOptimizeSetMembership): each element, and each number also as the other
// numeric types it converts to (a double only when the conversion is lossless). An empty list
// is an empty set, which answers false without evaluating its argument. ok is false for a list
// cel-go leaves to `in` itself (an element that is not a literal, or is bytes).
func constantSet(e celast.Expr) (set map[ref.Val]ref.Val, ok bool) {
	if e.Kind() != celast.ListKind || len(e.AsList().OptionalIndices()) > 0 {
		return nil, false
	}
	set = map[ref.Val]ref.Val{}
	for _, el := range e.AsList().Elements() {
		if el.Kind() != celast.LiteralKind {
			return nil, false
		}
		v := el.AsLiteral()
		if !types.IsPrimitiveType(v) || v.Type() == types.BytesType {
			return nil, false
		}
		set[v] = types.True
		var also []ref.Type
		switch v.(type) {
		case types.Double:
			also = []ref.Type{types.IntType, types.UintType}
		case types.Int:
			also = []ref.Type{types.DoubleType, types.UintType}
		case types.Uint:
			also = []ref.Type{types.DoubleType, types.IntType}
		}
		for _, t := range also {
			c := v.ConvertToType(t)
			if types.IsError(c) {
				continue
			}
			if _, isDouble := v.(types.Double); isDouble && c.Equal(v) != types.True {
				continue // lossy
			}
			set[c] = types.True
		}
	}
	return set, true
}

// setMembership is `in` against a constant set, as cel-go's evalSetMembership answers it.
func setMembership(arg nexpr, set map[ref.Val]ref.Val) nexpr {
	if len(set) == 0 {
		return func(*nframe) ref.Val { return types.False }
	}
	return func(fr *nframe) ref.Val {
		v := arg(fr)
		if types.IsUnknownOrError(v) {
			return v
		}
		if r, ok := set[v]; ok {
			return r
		}
		return types.False
	}
}

// matches is `matches` with a constant pattern, compiled once, as cel-go's
// MatchesRegexOptimization does.
func matches(in nexpr, pattern string) (nexpr, error) {
	re, err := regexp.Compile(pattern)
	if err != nil {
		return nil, err
	}
	return func(fr *nframe) ref.Val {
		v := in(fr)
		if types.IsUnknownOrError(v) {
			return v
		}
		s, ok := v.Value().(string)
		if !ok {
			return types.NoSuchOverloadErr()
		}
		return types.Bool(re.MatchString(s))
	}, nil
}

// callable reports whether fn takes arg0 as cel-go's evalUnary, evalBinary and evalVarArgs
// decide it; one that does not is left to cel-go (a receiver, or no such overload).
func callable(fn *functions.Overload, arg0 ref.Val) bool {
	return fn.OperandTrait == 0 || fn.NonStrict && types.IsUnknownOrError(arg0) || arg0.Type().HasTrait(fn.OperandTrait)
}

// unaryFast and binaryFast answer the calls filters make most (an exists() loop's two, and
// the string tests) without the bindings' runtime type guards: each answers exactly what the
// binding does for the argument types it takes, and leaves any other to the binding.
var (
	unaryFast = map[string]func(ref.Val) (ref.Val, bool){
		operators.LogicalNot: func(v ref.Val) (ref.Val, bool) {
			b, ok := v.(types.Bool)
			return !b, ok
		},
		operators.NotStrictlyFalse: func(v ref.Val) (ref.Val, bool) {
			b, ok := v.(types.Bool)
			return b, ok
		},
	}
	stringTests = map[string]func(s, t string) bool{
		overloads.StartsWith: strings.HasPrefix,
		overloads.EndsWith:   strings.HasSuffix,
		overloads.Contains:   strings.Contains,
	}
	binaryFast = map[string]func(l, r ref.Val) (ref.Val, bool){
		overloads.StartsWith: stringTest(strings.HasPrefix),
		overloads.EndsWith:   stringTest(strings.HasSuffix),
		overloads.Contains:   stringTest(strings.Contains),
	}
)

func stringTest(test func(s, t string) bool) func(l, r ref.Val) (ref.Val, bool) {
	return func(l, r ref.Val) (ref.Val, bool) {
		s, ok := l.(types.String)
		t, ok2 := r.(types.String)
		if !ok || !ok2 {
			return nil, false
		}
		return types.Bool(test(string(s), string(t))), true
	}
}

func unary(arg nexpr, fn *functions.Overload, fast func(ref.Val) (ref.Val, bool)) nexpr {
	return func(fr *nframe) ref.Val {
		a := arg(fr)
		if fast != nil {
			if v, ok := fast(a); ok {
				return v
			}
		}
		if !fn.NonStrict && types.IsUnknownOrError(a) {
			return a
		}
		if !callable(fn, a) {
			return fr.bail()
		}
		return fn.Unary(a)
	}
}

func binary(lhs, rhs nexpr, fn *functions.Overload, fast func(l, r ref.Val) (ref.Val, bool)) nexpr {
	answer := binaryOf(fn, fast)
	return func(fr *nframe) ref.Val { return answer(fr, lhs(fr), rhs(fr)) }
}

// binaryOf is a binary call over its operands' values, as cel-go's evalBinary.
func binaryOf(fn *functions.Overload, fast func(l, r ref.Val) (ref.Val, bool)) func(fr *nframe, l, r ref.Val) ref.Val {
	return func(fr *nframe, l, r ref.Val) ref.Val {
		if fast != nil {
			if v, ok := fast(l, r); ok {
				return v
			}
		}
		if !fn.NonStrict {
			if types.IsUnknownOrError(l) {
				return l
			}
			if types.IsUnknownOrError(r) {
				return r
			}
		}
		if !callable(fn, l) {
			return fr.bail()
		}
		return fn.Binary(l, r)
	}
}

func varArgs(args []nexpr, fn *functions.Overload) nexpr {
	return func(fr *nframe) ref.Val {
		vals := make([]ref.Val, len(args))
		for i, a := range args {
			vals[i] = a(fr)
			if !fn.NonStrict && types.IsUnknownOrError(vals[i]) {
				return vals[i]
			}
		}
		if !callable(fn, vals[0]) {
			return fr.bail()
		}
		return fn.Function(vals...)
	}
}
