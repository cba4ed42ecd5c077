package index

import (
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// A plain path is a JSONPath made only of field steps (.name), index steps ([n]) and every
// element ([*]): spec.nodeName, spec.containers[*].image, metadata.labels.app. Most paths asked
// of a fleet are plain, and client-go's JSONPath evaluates them with a general interpreter and
// several allocations per value. A plain path is walked directly instead: struct fields by
// their JSON names through a per-type table (fieldsOf), map keys, slice elements. Where the walk
// meets anything it does not handle the same way as client-go's JSONPath would, it gives up
// for that object and the JSONPath evaluates it: the values are the same either way
// (TestPlainPathsMatchJSONPath, FuzzPlainPath).

type stepKind int

const (
	stepField stepKind = iota
	stepIndex
	stepAll
)

type pathStep struct {
	kind  stepKind
	name  string // of a field step
	index int    // of an index step
	// last is the struct type a field step last met and where the field is in it: the objects
	// of one resource all meet the same types, so the walk looks each field up once, not per
	// object. Shared by concurrent walks.
	last *atomic.Pointer[stepHit]
}

// stepHit is a field step's lookup in one struct type.
type stepHit struct {
	t  reflect.Type
	jf jsonField
	ok bool
}

// field finds st's field in struct type t.
func (st pathStep) field(t reflect.Type) (jsonField, bool) {
	if h := st.last.Load(); h != nil && h.t == t {
		return h.jf, h.ok
	}
	jf, ok := fieldsOf(t)[st.name]
	st.last.Store(&stepHit{t: t, jf: jf, ok: ok})
	return jf, ok
}

// parsePlainPath reads tmpl, a template as compileJSONPath has it ("{...}"), as a plain path;
// ok is false when it is anything else.
func parsePlainPath(tmpl string) ([]pathStep, bool) {
	if !strings.HasPrefix(tmpl, "{") || !strings.HasSuffix(tmpl, "}") {
		return nil, false
	}
	body := strings.TrimPrefix(tmpl[1:len(tmpl)-1], "$")
	if body == "" || !onlyStarSteps(body) {
		return nil, false
	}
	var steps []pathStep
	for body != "" {
		switch body[0] {
		case '.':
			end := 1
			for end < len(body) && body[end] != '.' && body[end] != '[' {
				end++
			}
			name := body[1:end]
			if name == "" || strings.ContainsAny(name, "*{}\\'\"?@()*,: \t]") {
				return nil, false // "..", a recursive descent, or a name the walk does not read
			}
			steps = append(steps, pathStep{kind: stepField, name: name, last: new(atomic.Pointer[stepHit])})
			body = body[end:]
		case '[':
			end := strings.IndexByte(body, ']')
			if end < 0 {
				return nil, false
			}
			arg := body[1:end]
			if arg == "*" {
				steps = append(steps, pathStep{kind: stepAll})
			} else {
				n, err := strconv.Atoi(arg)
				if err != nil || n < 0 || strconv.Itoa(n) != arg {
					return nil, false // a slice, a negative index, a filter, a quoted key
				}
				steps = append(steps, pathStep{kind: stepIndex, index: n})
			}
			body = body[end+1:]
		default:
			return nil, false
		}
	}
	return steps, len(steps) > 0 && steps[0].kind == stepField
}

// onlyStarSteps reports whether every special character of body is the star of a [*] step.
func onlyStarSteps(body string) bool {
	rest := strings.ReplaceAll(body, "[*]", "")
	return !strings.ContainsAny(rest, "{}\\'\"?@()*,: \t")
}

// plainValues walks steps through obj and appends the values found to out, as appendValue
// would of the JSONPath's results. ok is false when the walk gave up on obj.
func plainValues(steps []pathStep, obj any, out []string) ([]string, bool) {
	var v reflect.Value
	if u, isU := obj.(*unstructured.Unstructured); isU {
		v = reflect.ValueOf(u.Object)
	} else {
		v = reflect.ValueOf(obj)
	}
	return walkPlain(steps, v, out)
}

func walkPlain(steps []pathStep, v reflect.Value, out []string) ([]string, bool) {
	for i, st := range steps {
		for v.Kind() == reflect.Interface || v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return out, true // nothing there: no value
			}
			v = v.Elem()
		}
		switch st.kind {
		case stepField:
			switch v.Kind() {
			case reflect.Struct:
				jf, ok := st.field(v.Type())
				if !ok {
					return out, false
				}
				f, err := v.FieldByIndexErr(jf.index)
				if err != nil {
					return out, true // through a nil embedded pointer: nothing there
				}
				v = f
			case reflect.Map:
				if v.Type().Key().Kind() != reflect.String {
					return out, false
				}
				v = v.MapIndex(reflect.ValueOf(st.name).Convert(v.Type().Key()))
				if !v.IsValid() {
					return out, true // a missing key: no value
				}
			default:
				return out, false
			}
		case stepIndex:
			if v.Kind() != reflect.Slice && v.Kind() != reflect.Array {
				return out, false
			}
			if st.index >= v.Len() {
				return out, true
			}
			v = v.Index(st.index)
		case stepAll:
			if v.Kind() != reflect.Slice && v.Kind() != reflect.Array {
				return out, false
			}
			for j := range v.Len() {
				var ok bool
				if out, ok = walkPlain(steps[i+1:], v.Index(j), out); !ok {
					return out, false
				}
			}
			return out, true
		}
	}
	for v.Kind() == reflect.Interface || v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return out, true
		}
		v = v.Elem()
	}
	return appendValue(out, v), true
}
