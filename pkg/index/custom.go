package index

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	lru "github.com/hashicorp/golang-lru/v2"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/jsonpath"
)

// Spec declares a custom index, as the config file does. Exactly one of JSONPath and CEL is set.
type Spec struct {
	Name string `json:"name"`
	// JSONPath is a kubectl-style template such as "{.spec.nodeName}" (braces optional). Every
	// value it finds becomes an index value.
	JSONPath string `json:"jsonPath,omitempty"`
	// CEL is an expression over `object` (the object as JSON-like data) that yields a string, a
	// list of strings, a bool or a number. A missing field yields no value.
	CEL string `json:"cel,omitempty"`
}

// compiled caches compiled expressions: configs repeat the same expression for many resources,
// and reloads compile them again. Bounded, as the set of expressions is user input.
var compiled, _ = lru.New[string, cache.IndexFunc](256)

// Compile validates spec and returns its index function. Errors name the field at fault.
func Compile(spec Spec) (cache.IndexFunc, error) {
	if spec.Name == "" {
		return nil, fmt.Errorf("index: name is required")
	}
	if _, builtin := Builtins()[spec.Name]; builtin {
		return nil, fmt.Errorf("index %q: name: taken by a built-in index", spec.Name)
	}
	switch {
	case spec.JSONPath != "" && spec.CEL != "":
		return nil, fmt.Errorf("index %q: set jsonPath or cel, not both", spec.Name)
	case spec.JSONPath != "":
		if f, ok := compiled.Get("jsonpath\x00" + spec.JSONPath); ok {
			return f, nil
		}
		f, err := compileJSONPath(spec.JSONPath)
		if err != nil {
			return nil, fmt.Errorf("index %q: jsonPath: %w", spec.Name, err)
		}
		compiled.Add("jsonpath\x00"+spec.JSONPath, f)
		return f, nil
	case spec.CEL != "":
		if f, ok := compiled.Get("cel\x00" + spec.CEL); ok {
			return f, nil
		}
		f, err := compileCEL(spec.CEL)
		if err != nil {
			return nil, fmt.Errorf("index %q: cel: %w", spec.Name, err)
		}
		compiled.Add("cel\x00"+spec.CEL, f)
		return f, nil
	}
	return nil, fmt.Errorf("index %q: one of jsonPath or cel is required", spec.Name)
}

func compileJSONPath(expr string) (cache.IndexFunc, error) {
	tmpl := strings.TrimSpace(expr)
	if !strings.HasPrefix(tmpl, "{") {
		tmpl = "{" + tmpl + "}"
	}
	slow, err := jsonPathFunc(tmpl)
	if err != nil {
		return nil, err
	}
	plain, isPlain := parsePlainPath(tmpl)
	if !isPlain {
		return slow, nil
	}
	return func(obj any) ([]string, error) {
		if out, ok := plainValues(plain, obj, nil); ok {
			return out, nil
		}
		return slow(obj)
	}, nil
}

// jsonPathFunc evaluates tmpl with client-go's JSONPath.
func jsonPathFunc(tmpl string) (cache.IndexFunc, error) {
	parse := func() (*jsonpath.JSONPath, error) {
		jp := jsonpath.New("index").AllowMissingKeys(true)
		return jp, jp.Parse(tmpl)
	}
	if _, err := parse(); err != nil {
		return nil, err
	}
	// A parsed JSONPath keeps state while it runs; index functions run concurrently for
	// different clusters, so each run takes its own from the pool.
	pool := sync.Pool{New: func() any { jp, _ := parse(); return jp }}
	return func(obj any) ([]string, error) {
		jp := pool.Get().(*jsonpath.JSONPath)
		data := obj
		if u, ok := obj.(*unstructured.Unstructured); ok {
			data = u.Object
		}
		results, err := findResults(jp, data)
		if err != nil {
			// A path that does not apply to this object indexes nothing. The evaluator is
			// dropped: a failed run (inside a range) leaves it in a state the next would
			// inherit.
			return nil, nil
		}
		var out []string
		for _, rs := range results {
			for _, v := range rs {
				out = appendValue(out, v)
			}
		}
		pool.Put(jp)
		return out, nil
	}, nil
}

// findResults runs jp on data. A path is user input (a config's index, a summary's key) and
// jsonpath walks typed objects by reflection: a panic there is the path's error, not the
// daemon's end.
func findResults(jp *jsonpath.JSONPath, data any) (results [][]reflect.Value, err error) {
	defer func() {
		if r := recover(); r != nil {
			results, err = nil, fmt.Errorf("jsonpath: %v", r)
		}
	}()
	return jp.FindResults(data)
}

func appendValue(out []string, v reflect.Value) []string {
	for v.Kind() == reflect.Interface || v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return out
		}
		v = v.Elem()
	}
	switch v.Kind() {
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			out = appendValue(out, v.Index(i))
		}
		return out
	case reflect.Struct:
		return appendScalarJSON(out, v) // a Time, a Quantity; nothing for other structs
	case reflect.Map:
		return out // not a scalar: nothing sensible to index
	}
	if v.Kind() == reflect.String && v.String() == "" {
		return out
	}
	if v.Kind() == reflect.String && v.Type().NumMethod() == 0 && v.CanInterface() {
		// What fmt.Sprint would print of a string type without a String or Error method
		// (PodPhase, an image), without boxing or copying it.
		return append(out, v.String())
	}
	if !v.CanInterface() {
		// A recursive path (..x) walks into a typed object's unexported fields (a
		// Quantity's, a Time's): those are not the object's JSON, so they index nothing.
		return out
	}
	return append(out, fmt.Sprint(v.Interface()))
}

// appendScalarJSON appends the value of a struct that writes itself as a JSON string or number
// (metav1.Time as RFC 3339, resource.Quantity as "100m"), as it reads in the object's JSON.
func appendScalarJSON(out []string, v reflect.Value) []string {
	if !v.CanInterface() {
		return out
	}
	m, ok := v.Interface().(json.Marshaler)
	if !ok {
		return out
	}
	b, err := m.MarshalJSON()
	if err != nil || len(b) == 0 {
		return out
	}
	switch {
	case b[0] == '"':
		var s string
		if json.Unmarshal(b, &s) == nil && s != "" {
			out = append(out, s)
		}
	case b[0] == '-' || (b[0] >= '0' && b[0] <= '9'):
		out = append(out, string(b))
	}
	return out
}

var celEnv = func() *cel.Env {
	env, err := cel.NewEnv(cel.Variable("object", cel.DynType))
	if err != nil {
		panic(err) // a constant environment: fails in every test run if ever wrong
	}
	return env
}()

func compileCEL(expr string) (cache.IndexFunc, error) {
	ast, iss := celEnv.Compile(expr)
	if iss.Err() != nil {
		return nil, iss.Err()
	}
	prg, err := celEnv.Program(ast, cel.EvalOptions(cel.OptOptimize))
	if err != nil {
		return nil, err
	}
	np, _ := planNative(ast) // nil: the expression uses what nativeProgram does not plan
	return celIndexFunc(prg, np), nil
}

// celIndexFunc indexes an object by the values of an expression: its native program's where
// planned and it does not bail, else cel-go's.
func celIndexFunc(prg cel.Program, np *nativeProgram) cache.IndexFunc {
	return func(obj any) ([]string, error) {
		object, err := objectValue(obj, nil)
		if err != nil {
			return nil, fmt.Errorf("cel index: %w", err)
		}
		if np != nil {
			if val, ok := np.eval(object); ok {
				if types.IsError(val) {
					return nil, nil // as cel-go's Eval answers an error value: below
				}
				return celValues(val), nil
			}
		}
		val, _, err := prg.Eval(&objectActivation{object: object})
		if err != nil {
			return nil, nil // missing fields and the like: nothing to index
		}
		return celValues(val), nil
	}
}

// jsonField is where a JSON field of a struct type lives.
type jsonField struct {
	index     []int // field index path (through inline structs such as TypeMeta)
	omitEmpty bool
}

// jsonFields caches fieldsOf per type.
var jsonFields sync.Map // reflect.Type → map[string]jsonField

// fieldsOf maps a struct type's JSON field names to their fields.
func fieldsOf(t reflect.Type) map[string]jsonField {
	if m, ok := jsonFields.Load(t); ok {
		return m.(map[string]jsonField)
	}
	m := map[string]jsonField{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && name == "" && strings.Contains(opts, "inline") && f.Type.Kind() == reflect.Struct {
			for n, jf := range fieldsOf(f.Type) {
				m[n] = jsonField{append([]int{i}, jf.index...), jf.omitEmpty}
			}
			continue
		}
		if name != "" && name != "-" {
			m[name] = jsonField{[]int{i}, strings.Contains(opts, "omitempty")}
		}
	}
	jsonFields.Store(t, m)
	return m
}

func celValues(v ref.Val) []string {
	switch v.Type() {
	case types.StringType:
		if s := v.Value().(string); s != "" {
			return []string{s}
		}
		return nil
	case types.NullType:
		return nil
	case types.ListType:
		native, err := v.ConvertToNative(reflect.TypeOf([]any{}))
		if err != nil {
			return nil
		}
		var out []string
		for _, e := range native.([]any) {
			if e != nil && fmt.Sprint(e) != "" {
				out = append(out, fmt.Sprint(e))
			}
		}
		return out
	}
	return []string{fmt.Sprint(v.Value())}
}
