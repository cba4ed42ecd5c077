package index

import (
	"encoding/base64"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"github.com/google/cel-go/interpreter"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/structured-merge-diff/v6/value"
)

// CEL reads `object` as JSON-like data, as Kubernetes' CEL does: what
// runtime.DefaultUnstructuredConverter makes of a typed object. Converting a whole typed Pod
// costs microseconds, and an expression reads a few of its fields. So a typed object is
// handed to CEL as a view (structVal, mapVal, listVal) that converts a field only when the
// expression reads it, by the converter's rules:
//   - a field is named by its json tag, or its Go name without one; an anonymous struct field
//     with no tag name is inlined; a later field of the same name hides an earlier one;
//   - omitempty leaves out false, 0, "", and nil or empty maps, slices, pointers and
//     interfaces; omitzero leaves out what the type's zero test says;
//   - a type with its own conversion (metav1.Time, resource.Quantity, intstr.IntOrString,
//     a json.Marshaler) is converted by it, whole;
//   - nil maps, slices, pointers and interfaces are null; []byte is base64 text; every integer
//     is an int64 and every float a double.
//
// Every value a view gives is the one the full conversion would give at that place
// (TestCELViewMatchesConversion, FuzzCELView). One difference remains: the converter refuses
// a whole object for a value it cannot convert (an unsigned integer over 2^63-1, an array, a
// map with keys that are not strings), where a view fails only an expression that reads it.

// objectValue is obj as CEL's `object`. With st, the object and every value its views hand
// out are held to st's bound (evalState); without, none is.
func objectValue(obj any, st *evalState) (ref.Val, error) {
	switch o := obj.(type) {
	case *unstructured.Unstructured:
		if o.Object == nil {
			return types.DefaultTypeAdapter.NativeToValue(map[string]any{}), nil
		}
		st.admit(len(o.Object))
		return st.newMap(reflect.ValueOf(o.Object), false, nil), nil
	case runtime.Object:
		v := reflect.ValueOf(o)
		if v.Kind() == reflect.Pointer && !v.IsNil() && v.Elem().Kind() == reflect.Struct {
			if info := objectInfo(v.Elem().Type()); info.viewable {
				st.admit(len(info.fields))
				return st.newStruct(v.Elem(), info), nil
			}
		}
		data, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
		if err != nil {
			return nil, err
		}
		st.admit(len(data))
		return st.newMap(reflect.ValueOf(data), false, nil), nil
	}
	return nil, fmt.Errorf("%T is not a Kubernetes object", obj)
}

// lastObject is the object type objectValue last met, with its facts: a scan or a watch
// meets one type object after object, which this finds without structOf's map.
var lastObject atomic.Pointer[objectType]

type objectType struct {
	t    reflect.Type
	info *structInfo
}

// objectInfo is structOf(t) for an object's type.
func objectInfo(t reflect.Type) *structInfo {
	if last := lastObject.Load(); last != nil && last.t == t {
		return last.info
	}
	info := structOf(t)
	lastObject.Store(&objectType{t: t, info: info})
	return info
}

// evalState is one evaluation's: the bound on the size of every string, list and map its
// views hand out (a string's bytes, a list's items, a map's entries, a struct's fields), and
// the views themselves. The cost of an expression is estimated at compile time for values of
// at most that size (CompileFilter), so an evaluation that sees none larger stays within the
// estimate and need not have its cost tracked. A larger value is handed out as an error
// instead, and over is set: the caller evaluates again, tracking the cost.
//
// The views are allocated in the state's slabs, which a pooled state keeps from one
// evaluation to the next: an evaluation then allocates little but CEL's own values. A state
// is used by one goroutine at a time, and no view outlives its evaluation (release). A nil
// state bounds nothing and allocates each view on its own.
type evalState struct {
	max  int
	over bool
	// work counts the values views hand out (each field or item read, each key iterated): a
	// read CEL's estimate may not count (a field of a dynamic value), at a cost of 1 each.
	// Past maxWork, the evaluation is over too.
	work, maxWork int

	act     objectActivation
	frame   nframe // a native program's (nativeProgram.evalIn)
	structs []structVal
	maps    []mapVal
	lists   []listVal
	iters   []listIter
}

var evalStates = sync.Pool{New: func() any { return new(evalState) }}

// newEvalState is a pooled state bounded at max and maxWork; release it when the evaluation
// is over and its value read.
func newEvalState(max, maxWork int) *evalState {
	st := evalStates.Get().(*evalState)
	st.max, st.over, st.work, st.maxWork = max, false, 0, maxWork
	return st
}

// maxSlab is the most views of a kind a pooled state keeps room for.
const maxSlab = 4096

// release returns st to the pool. Its views must no longer be used.
func (st *evalState) release() {
	st.structs, st.maps, st.lists, st.iters = reuse(st.structs), reuse(st.maps), reuse(st.lists), reuse(st.iters)
	st.act.object = nil
	evalStates.Put(st)
}

// reuse empties a slab for the next evaluation, dropping the objects its views point into, and
// the slab itself when it grew past maxSlab.
func reuse[T any](slab []T) []T {
	if cap(slab) > maxSlab {
		return nil
	}
	clear(slab)
	return slab[:0]
}

// spend counts n reads, and reports whether they are within maxWork; past it, the evaluation
// is over.
func (st *evalState) spend(n int) bool {
	if st == nil {
		return true
	}
	st.work += n
	if st.work > st.maxWork {
		st.over = true
		return false
	}
	return true
}

func (st *evalState) tooMuch() ref.Val {
	return types.NewErr("more than %d reads: over the bound of an untracked evaluation", st.maxWork)
}

// admit reports whether a value of size n is within the bound, and notes when it is not.
func (st *evalState) admit(n int) bool {
	if st == nil || n <= st.max {
		return true
	}
	st.over = true
	return false
}

func (st *evalState) newStruct(v reflect.Value, info *structInfo) *structVal {
	if st == nil {
		return &structVal{v: v, info: info}
	}
	st.structs = append(st.structs, structVal{v: v, info: info, st: st})
	return &st.structs[len(st.structs)-1]
}

func (st *evalState) newMap(v reflect.Value, conv bool, info *structInfo) *mapVal {
	if st == nil {
		return &mapVal{v: v, conv: conv, info: info}
	}
	st.maps = append(st.maps, mapVal{v: v, conv: conv, info: info, st: st})
	return &st.maps[len(st.maps)-1]
}

func (st *evalState) newList(v reflect.Value, conv bool, info *structInfo) *listVal {
	if st == nil {
		return &listVal{v: v, conv: conv, info: info}
	}
	st.lists = append(st.lists, listVal{v: v, conv: conv, info: info, st: st})
	return &st.lists[len(st.lists)-1]
}

func (st *evalState) newListIter(l *listVal) *listIter {
	if st == nil {
		return &listIter{l: l}
	}
	st.iters = append(st.iters, listIter{l: l})
	return &st.iters[len(st.iters)-1]
}

func (st *evalState) tooLarge(n int) ref.Val {
	return types.NewErr("a value of size %d is over the bound of %d", n, st.max)
}

func (st *evalState) str(s string) ref.Val {
	if !st.admit(len(s)) {
		return st.tooLarge(len(s))
	}
	return types.String(s)
}

// objectActivation binds `object` alone, without the map an activation is otherwise built
// from.
type objectActivation struct{ object ref.Val }

func (a *objectActivation) ResolveName(name string) (any, bool) {
	if name == "object" {
		return a.object, true
	}
	return nil, false
}

func (a *objectActivation) Parent() interpreter.Activation { return nil }

// viewField is one JSON field of a struct type.
type viewField struct {
	name      string
	index     []int // through inlined structs; may pass an embedded pointer
	omitEmpty bool
	omitZero  func(reflect.Value) bool
	converts  bool        // the field's type has its own conversion
	info      *structInfo // the field's type's, when it is a struct
	// elems holds the facts of a slice's or map's elements once the field is first read: not
	// while structOf computes the struct, as an element type may hold it (a tree's children).
	elems *atomic.Pointer[collFacts]
}

// collFacts is what a list or map view needs of its elements' type (elemFacts).
type collFacts struct {
	conv bool
	info *structInfo
}

// structInfo is what a view needs of a struct type, computed once per type.
type structInfo struct {
	fields   []viewField      // in the order the converter writes them
	byName   map[string][]int // name → indexes into fields, last written first
	viewable bool             // false: convert objects of this type whole
}

var structInfos sync.Map // reflect.Type → *structInfo

func structOf(t reflect.Type) *structInfo {
	if info, ok := structInfos.Load(t); ok {
		return info.(*structInfo)
	}
	info := &structInfo{byName: map[string][]int{}, viewable: true}
	if converts(t) {
		info.viewable = false // converted by its own methods, never field by field
	} else {
		info.viewable = collectFields(t, nil, info)
	}
	for i := len(info.fields) - 1; i >= 0; i-- {
		n := info.fields[i].name
		info.byName[n] = append(info.byName[n], i)
	}
	actual, _ := structInfos.LoadOrStore(t, info)
	return actual.(*structInfo)
}

// collectFields appends t's fields to info, those of inlined structs in their place. It
// reports false for an inlined field the converter would not merge field by field.
func collectFields(t reflect.Type, prefix []int, info *structInfo) bool {
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() && !f.Anonymous {
			return false // the converter reads it as it reads any other; a view does not
		}
		index := append(append([]int(nil), prefix...), i)
		tag, hasTag := f.Tag.Lookup("json")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue // the converter skips "-," too, where encoding/json names the field "-"
		}
		if !hasTag || tag == "" {
			name, opts = "", ""
		}
		if name == "" && !f.Anonymous {
			name = f.Name
		}
		vf := viewField{name: name, index: index, converts: converts(f.Type)}
		for _, o := range strings.Split(opts, ",") {
			switch o {
			case "omitempty":
				vf.omitEmpty = true
			case "omitzero":
				vf.omitZero = value.OmitZeroFunc(f.Type)
			}
		}
		if name != "" {
			if f.Type.Kind() == reflect.Struct && !vf.converts {
				vf.info = structOf(f.Type) // ends: no struct holds itself by value
			}
			if k := f.Type.Kind(); (k == reflect.Slice || k == reflect.Map) && !vf.converts {
				vf.elems = new(atomic.Pointer[collFacts])
			}
			info.fields = append(info.fields, vf)
			continue
		}
		// Inlined. The converter merges a struct, or a pointer to one, field by field; an
		// omitempty or omitzero on it can leave it out whole, which a view does not model.
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if ft.Kind() != reflect.Struct || vf.omitEmpty || vf.omitZero != nil || vf.converts || !collectFields(ft, index, info) {
			return false
		}
	}
	return true
}

// isEmpty is what omitempty leaves out, as the converter decides it.
func isEmpty(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Array, reflect.String:
		return v.Len() == 0
	case reflect.Bool:
		return !v.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return v.Int() == 0
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return v.Uint() == 0
	case reflect.Float32, reflect.Float64:
		return v.Float() == 0
	case reflect.Map, reflect.Slice:
		return v.IsNil() || v.Len() == 0
	case reflect.Pointer, reflect.Interface:
		return v.IsNil()
	}
	return false
}

// field is the value of field i of sv, and whether the conversion writes it.
func (s *structVal) field(i int) (reflect.Value, bool) {
	vf := &s.info.fields[i]
	var fv reflect.Value
	if len(vf.index) == 1 {
		fv = s.v.Field(vf.index[0]) // not inlined: most fields
	} else {
		var err error
		if fv, err = s.v.FieldByIndexErr(vf.index); err != nil {
			return reflect.Value{}, false // inside a nil inlined pointer: nothing written
		}
	}
	if vf.omitEmpty && isEmpty(fv) || vf.omitZero != nil && vf.omitZero(fv) {
		return reflect.Value{}, false
	}
	return fv, true
}

// fieldValue is a struct field's CEL value. The converter writes a field of a basic kind as
// it is, before it looks for the type's own conversion.
func fieldValue(v reflect.Value, vf *viewField, st *evalState) ref.Val {
	switch v.Kind() {
	case reflect.String, reflect.Bool,
		reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return valueOf(v, false, nil, st) // as it is, whatever conversion the type has
	}
	var elems *collFacts
	if vf.elems != nil {
		if elems = vf.elems.Load(); elems == nil {
			elems = elemFacts(v.Type())
			vf.elems.Store(elems)
		}
	}
	return valueOfWith(v, vf.converts, vf.info, elems, st)
}

func uintValue(u uint64) ref.Val {
	if u > math.MaxInt64 {
		return types.NewErr("unsigned value %d does not fit into int64", u)
	}
	return types.Int(int64(u))
}

// typedValue is v's CEL value, as the converter would make it anywhere but a struct field.
// JSON data (the converter's own, map[string]any, []any, string, int64, float64, bool, and an
// unstructured object's) reads as CEL reads it. An unstructured object built by hand with
// unsigned integers or []byte, which is not JSON data, reads them as int and base64 text
// where CEL over the data itself says uint and bytes.
func typedValue(v reflect.Value, st *evalState) ref.Val {
	if !v.IsValid() {
		return types.NullValue
	}
	return valueOf(v, converts(v.Type()), nil, st)
}

// elemFacts is what valueOf needs of the elements of t, a slice or map type: looked up once
// for a list or map, not once per element.
func elemFacts(t reflect.Type) *collFacts {
	et := t.Elem()
	f := &collFacts{conv: converts(et)}
	if !f.conv && et.Kind() == reflect.Struct {
		f.info = structOf(et)
	}
	return f
}

// converts reports whether t has its own conversion (a json.Marshaler, an
// UnstructuredConverter).
func converts(t reflect.Type) bool { return value.TypeReflectEntryOf(t).CanConvertToUnstructured() }

// valueOf is typedValue for a v whose type is known to convert itself, or not (conv): the
// views look that up once per field, list or map, not once per value.
// info, when known, is the struct info of v's type.
func valueOf(v reflect.Value, conv bool, info *structInfo, st *evalState) ref.Val {
	return valueOfWith(v, conv, info, nil, st)
}

// valueOfWith is valueOf with, when known (a struct field's, computed once per field), the
// facts of v's elements when it is a slice or a map.
func valueOfWith(v reflect.Value, conv bool, info *structInfo, elems *collFacts, st *evalState) ref.Val {
	t := v.Type()
	if conv {
		u, err := value.TypeReflectEntryOf(t).ToUnstructured(v)
		if err != nil {
			return types.NewErr("%s: %v", t, err)
		}
		if u == nil {
			return types.NullValue
		}
		return typedValue(reflect.ValueOf(u), st)
	}
	switch t.Kind() {
	case reflect.String:
		return st.str(v.String())
	case reflect.Bool:
		return types.Bool(v.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return types.Int(v.Int())
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return uintValue(v.Uint())
	case reflect.Float32, reflect.Float64:
		return types.Double(v.Float())
	case reflect.Slice:
		if v.IsNil() {
			return types.NullValue
		}
		if t.Elem().Kind() == reflect.Uint8 {
			return st.str(base64.StdEncoding.EncodeToString(v.Bytes()))
		}
		if !st.admit(v.Len()) {
			return st.tooLarge(v.Len())
		}
		if elems == nil {
			elems = elemFacts(t)
		}
		return st.newList(v, elems.conv, elems.info)
	case reflect.Map:
		if v.IsNil() {
			return types.NullValue
		}
		if t.Key().Kind() != reflect.String {
			return types.NewErr("cannot convert a map keyed by %s", t.Key())
		}
		if !st.admit(v.Len()) {
			return st.tooLarge(v.Len())
		}
		if elems == nil {
			elems = elemFacts(t)
		}
		return st.newMap(v, elems.conv, elems.info)
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return types.NullValue
		}
		return typedValue(v.Elem(), st)
	case reflect.Struct:
		if info == nil {
			info = structOf(t)
		}
		if !info.viewable {
			return materialized(v, st)
		}
		if !st.admit(len(info.fields)) {
			return st.tooLarge(len(info.fields))
		}
		return st.newStruct(v, info)
	}
	return types.NewErr("cannot convert a value of kind %s", t.Kind())
}

// materialized converts a struct whole with the converter, for one a view does not model.
func materialized(v reflect.Value, st *evalState) ref.Val {
	p := reflect.New(v.Type())
	p.Elem().Set(v)
	data, err := runtime.DefaultUnstructuredConverter.ToUnstructured(p.Interface())
	if err != nil {
		return types.NewErr("%s: %v", v.Type(), err)
	}
	return typedValue(reflect.ValueOf(data), st)
}

// structVal is a typed struct as CEL's JSON-like map.
type structVal struct {
	v    reflect.Value
	info *structInfo
	st   *evalState
}

// mapVal is a map keyed by a string kind as CEL's map.
type mapVal struct {
	v    reflect.Value
	st   *evalState
	conv bool        // the values' type converts itself
	info *structInfo // the values' type's, when they are structs
}

// listVal is a slice as CEL's list.
type listVal struct {
	v    reflect.Value
	st   *evalState
	conv bool        // the items' type converts itself
	info *structInfo // the items' type's, when they are structs
}

var (
	_ traits.Mapper = (*structVal)(nil)
	_ traits.Mapper = (*mapVal)(nil)
	_ traits.Lister = (*listVal)(nil)
)

// native is val as the converter's data (map[string]any, []any, string, int64, ...), for the
// operations that need a value whole: conversion, concatenation, Value. Through st it reads as
// the views do: each value admitted, each read spent.
func native(val ref.Val, st *evalState) (any, error) {
	switch x := val.(type) {
	case *structVal:
		out := make(map[string]any, len(x.info.byName))
		for i := range x.info.fields {
			fv, ok := x.field(i)
			if !ok {
				continue
			}
			if !st.spend(1) {
				return nil, st.tooMuch().(*types.Err)
			}
			n, err := native(fieldValue(fv, &x.info.fields[i], st), st)
			if err != nil {
				return nil, err
			}
			out[x.info.fields[i].name] = n
		}
		return out, nil
	case *mapVal:
		out := make(map[string]any, x.v.Len())
		it := x.v.MapRange()
		for it.Next() {
			if !st.spend(1) {
				return nil, st.tooMuch().(*types.Err)
			}
			n, err := native(valueOf(it.Value(), x.conv, x.info, st), st)
			if err != nil {
				return nil, err
			}
			out[it.Key().String()] = n
		}
		return out, nil
	case *listVal:
		out := make([]any, x.v.Len())
		for i := range out {
			if !st.spend(1) {
				return nil, st.tooMuch().(*types.Err)
			}
			n, err := native(valueOf(x.v.Index(i), x.conv, x.info, st), st)
			if err != nil {
				return nil, err
			}
			out[i] = n
		}
		return out, nil
	case *types.Err:
		return nil, x
	}
	if val == types.NullValue {
		return nil, nil
	}
	return val.Value(), nil
}

// standard is val converted whole, through st, into CEL's own value of the converter's data.
func standard(val ref.Val, st *evalState) ref.Val {
	n, err := native(val, st)
	if err != nil {
		return types.WrapErr(err)
	}
	return types.DefaultTypeAdapter.NativeToValue(n)
}

func nativeOrNil(val ref.Val, st *evalState) any {
	n, err := native(val, st)
	if err != nil {
		return nil
	}
	return n
}

// mapEqual is CEL's equality of a map (baseMap's), read through m's views: sizes first, then
// key by key, without converting either side whole.
func mapEqual(m traits.Mapper, other ref.Val) ref.Val {
	o, ok := other.(traits.Mapper)
	if !ok {
		return types.False
	}
	size := m.Size()
	if types.IsError(size) {
		return size
	}
	if size != o.Size() {
		return types.False
	}
	for it := m.Iterator(); it.HasNext() == types.True; {
		k := it.Next()
		if types.IsError(k) {
			return k
		}
		v, _ := m.Find(k)
		if types.IsError(v) {
			return v
		}
		ov, found := o.Find(k)
		if !found {
			return types.False
		}
		if types.Equal(v, ov) == types.False {
			return types.False
		}
	}
	return types.True
}

// findWhole is Find of a key that is not a string: in the map converted whole, which may fail.
func findWhole(v ref.Val, st *evalState, key ref.Val) (ref.Val, bool) {
	whole := standard(v, st)
	if types.IsError(whole) {
		return whole, false
	}
	return whole.(traits.Mapper).Find(key)
}

func noSuchKey(key ref.Val) ref.Val { return types.ValOrErr(key, "no such key: %v", key) }

// Find is the value of the field named key, when the conversion writes it.
func (s *structVal) Find(key ref.Val) (ref.Val, bool) {
	name, ok := key.(types.String)
	if !ok {
		return findWhole(s, s.st, key)
	}
	if !s.st.spend(1) {
		return s.st.tooMuch(), false
	}
	return s.lookup(s.info.byName[string(name)])
}

// lookup is Find of the fields at idx (byName's entry for a name), already spent.
func (s *structVal) lookup(idx []int) (ref.Val, bool) {
	for _, i := range idx {
		if fv, ok := s.field(i); ok {
			return fieldValue(fv, &s.info.fields[i], s.st), true
		}
	}
	return nil, false
}

// fieldHint remembers, for one field name read in one place of an expression, the struct
// type it last read it from, and where that type keeps it: most places read one type.
type fieldHint struct {
	name string
	last atomic.Pointer[hintEntry]
}

type hintEntry struct {
	info *structInfo
	idx  []int
}

// findHinted is Find of h's name.
func (s *structVal) findHinted(h *fieldHint) (ref.Val, bool) {
	fv, vf, err := s.rawHinted(h)
	if err != nil {
		return err, false
	}
	if vf == nil {
		return nil, false
	}
	return fieldValue(fv, vf, s.st), true
}

// rawHinted is findHinted before the field's value is made a CEL value: the field (vf nil
// when the conversion does not write it), or the error of a read past the state's bound.
func (s *structVal) rawHinted(h *fieldHint) (fv reflect.Value, vf *viewField, err ref.Val) {
	if !s.st.spend(1) {
		return reflect.Value{}, nil, s.st.tooMuch()
	}
	e := h.last.Load()
	if e == nil || e.info != s.info {
		e = &hintEntry{info: s.info, idx: s.info.byName[h.name]}
		h.last.Store(e)
	}
	for _, i := range e.idx {
		if fv, ok := s.field(i); ok {
			return fv, &s.info.fields[i], nil
		}
	}
	return reflect.Value{}, nil, nil
}

func (s *structVal) Get(key ref.Val) ref.Val {
	if v, ok := s.Find(key); ok {
		return v
	}
	return noSuchKey(key)
}

func (s *structVal) Contains(key ref.Val) ref.Val {
	v, ok := s.Find(key)
	if !ok && v != nil {
		return v // an error
	}
	return types.Bool(ok)
}

// names are the names the conversion writes, sorted: an expression iterates a view in the
// same order every time.
func (s *structVal) names() []string {
	s.st.spend(len(s.info.fields)) // past maxWork, over: the caller evaluates again
	var out []string
	for name, idx := range s.info.byName {
		for _, i := range idx {
			if _, ok := s.field(i); ok {
				out = append(out, name)
				break
			}
		}
	}
	slices.Sort(out)
	return out
}

func (s *structVal) Size() ref.Val               { return types.Int(len(s.names())) }
func (s *structVal) IsZeroValue() bool           { return len(s.names()) == 0 }
func (s *structVal) Iterator() traits.Iterator   { return &keyIter{keys: s.names(), st: s.st} }
func (s *structVal) Type() ref.Type              { return types.MapType }
func (s *structVal) Value() any                  { return nativeOrNil(s, s.st) }
func (s *structVal) Equal(other ref.Val) ref.Val { return mapEqual(s, other) }
func (s *structVal) ConvertToNative(t reflect.Type) (any, error) {
	return standard(s, s.st).ConvertToNative(t)
}
func (s *structVal) ConvertToType(t ref.Type) ref.Val { return convertMapType(s, s.st, t) }

func convertMapType(v ref.Val, st *evalState, t ref.Type) ref.Val {
	switch t {
	case types.TypeType:
		return types.MapType
	case types.MapType:
		return v
	}
	return standard(v, st).ConvertToType(t)
}

func (m *mapVal) Find(key ref.Val) (ref.Val, bool) {
	name, ok := key.(types.String)
	if !ok {
		return findWhole(m, m.st, key)
	}
	if !m.st.spend(1) {
		return m.st.tooMuch(), false
	}
	k := reflect.ValueOf(string(name))
	if kt := m.v.Type().Key(); kt != k.Type() {
		k = k.Convert(kt)
	}
	mv := m.v.MapIndex(k)
	if !mv.IsValid() {
		return nil, false
	}
	return valueOf(mv, m.conv, m.info, m.st), true
}

func (m *mapVal) Get(key ref.Val) ref.Val {
	if v, ok := m.Find(key); ok {
		return v
	}
	return noSuchKey(key)
}

func (m *mapVal) Contains(key ref.Val) ref.Val {
	v, ok := m.Find(key)
	if !ok && v != nil {
		return v
	}
	return types.Bool(ok)
}

// keys are the map's keys, sorted, as names are.
func (m *mapVal) keys() []string {
	out := make([]string, 0, m.v.Len())
	it := m.v.MapRange()
	for it.Next() {
		out = append(out, it.Key().String())
	}
	slices.Sort(out)
	return out
}

func (m *mapVal) Size() ref.Val                    { return types.Int(m.v.Len()) }
func (m *mapVal) IsZeroValue() bool                { return m.v.Len() == 0 }
func (m *mapVal) Iterator() traits.Iterator        { return &keyIter{keys: m.keys(), st: m.st} }
func (m *mapVal) Type() ref.Type                   { return types.MapType }
func (m *mapVal) Value() any                       { return nativeOrNil(m, m.st) }
func (m *mapVal) Equal(other ref.Val) ref.Val      { return mapEqual(m, other) }
func (m *mapVal) ConvertToType(t ref.Type) ref.Val { return convertMapType(m, m.st, t) }
func (m *mapVal) ConvertToNative(t reflect.Type) (any, error) {
	return standard(m, m.st).ConvertToNative(t)
}

func (l *listVal) Get(index ref.Val) ref.Val {
	i, err := types.IndexOrError(index)
	if err != nil {
		return types.ValOrErr(index, "%s", err.Error())
	}
	if i < 0 || i >= l.v.Len() {
		return types.NewErr("index '%d' out of range in list size '%d'", i, l.v.Len())
	}
	if !l.st.spend(1) {
		return l.st.tooMuch()
	}
	return valueOf(l.v.Index(i), l.conv, l.info, l.st)
}

func (l *listVal) Size() ref.Val             { return types.Int(l.v.Len()) }
func (l *listVal) IsZeroValue() bool         { return l.v.Len() == 0 }
func (l *listVal) Iterator() traits.Iterator { return l.st.newListIter(l) }
func (l *listVal) Type() ref.Type            { return types.ListType }
func (l *listVal) Value() any                { return nativeOrNil(l, l.st) }
func (l *listVal) Add(other ref.Val) ref.Val {
	whole := standard(l, l.st)
	if types.IsError(whole) {
		return whole // over the bound or the reads: not a list to add to
	}
	return whole.(traits.Adder).Add(other)
}

// Equal is CEL's equality of a list (baseList's), item by item through the views.
func (l *listVal) Equal(other ref.Val) ref.Val {
	o, ok := other.(traits.Lister)
	if !ok {
		return types.False
	}
	if l.Size() != o.Size() {
		return types.False
	}
	for i := range l.v.Len() {
		v := l.Get(types.Int(i))
		if types.IsError(v) {
			return v
		}
		if types.Equal(v, o.Get(types.Int(i))) == types.False {
			return types.False
		}
	}
	return types.True
}

// Contains is CEL's `in` of a list (baseList's), item by item through the views.
func (l *listVal) Contains(elem ref.Val) ref.Val {
	for i := range l.v.Len() {
		v := l.Get(types.Int(i))
		if types.IsError(v) {
			return v
		}
		if elem.Equal(v) == types.True {
			return types.True
		}
	}
	return types.False
}
func (l *listVal) ConvertToNative(t reflect.Type) (any, error) {
	return standard(l, l.st).ConvertToNative(t)
}

func (l *listVal) ConvertToType(t ref.Type) ref.Val {
	switch t {
	case types.TypeType:
		return types.ListType
	case types.ListType:
		return l
	}
	return standard(l, l.st).ConvertToType(t)
}

// iterBase is the ref.Val side of an iterator, which CEL never uses as a value.
type iterBase struct{}

func (iterBase) ConvertToNative(reflect.Type) (any, error) {
	return nil, fmt.Errorf("an iterator is not a value")
}
func (iterBase) ConvertToType(ref.Type) ref.Val { return types.NewErr("an iterator is not a value") }
func (iterBase) Equal(ref.Val) ref.Val          { return types.NewErr("an iterator is not a value") }
func (iterBase) Type() ref.Type                 { return types.IteratorType }
func (iterBase) Value() any                     { return nil }

type keyIter struct {
	iterBase
	keys []string
	st   *evalState
	i    int
}

func (it *keyIter) HasNext() ref.Val { return types.Bool(it.i < len(it.keys)) }
func (it *keyIter) Next() ref.Val {
	if it.i >= len(it.keys) {
		return nil
	}
	it.i++
	if !it.st.spend(1) {
		return it.st.tooMuch()
	}
	return it.st.str(it.keys[it.i-1])
}

type listIter struct {
	iterBase
	l *listVal
	i int
}

func (it *listIter) HasNext() ref.Val { return types.Bool(it.i < it.l.v.Len()) }
func (it *listIter) Next() ref.Val {
	if it.i >= it.l.v.Len() {
		return nil
	}
	it.i++
	return it.l.item(it.i - 1)
}

// item is the list's item i as an iteration reads it (listIter, niter): spent, then made a
// value. i is within the list.
func (l *listVal) item(i int) ref.Val {
	if !l.st.spend(1) {
		return l.st.tooMuch()
	}
	return valueOf(l.v.Index(i), l.conv, l.info, l.st)
}
