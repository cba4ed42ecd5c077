package index

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"testing"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// filterExprs are filters as users write them, on top of viewExprs: paths, comparisons,
// presence, string functions, macros, ternaries, and errors inside each.
var filterExprs = []string{
	"object.spec.containers.exists(c, c.image.startsWith('registry.example/'))",
	"object.metadata.labels['team'] == 'payments' && object.status.phase != 'Failed'",
	"object.metadata.name.matches('^web-[a-z0-9]+-[a-z]+$')",
	"matches(object.metadata.name, 'w.b')",
	"object.metadata.matches('x')",
	"!has(object.spec.nodeName) || object.spec.nodeName.endsWith('-17')",
	"object.spec.containers.all(c, c.resources.requests.cpu == '100m')",
	"object.spec.containers.exists_one(c, c.name == 'app')",
	"object.metadata.namespace in ['shop', 'web']",
	"size(object.spec.containers) > 1 ? object.spec.containers[1].name : 'none'",
	"object.spec.containers.map(c, c.image).filter(i, i.contains('envoy'))",
	"object.spec.containers.map(c, c.image).map(i, i.size())",
	"object.metadata.labels.exists(k, k.startsWith('app') && object.metadata.labels[k] == 'web')",
	"object.spec.nodeName.size() > 3 || object.spec.missing == 1",
	"object.spec.missing == 1 || true",
	"object.spec.missing == 1 && false",
	"!(object.spec.missing == 1)",
	"object.spec.containers.exists(c, c.missing == 'x')",
	"object.spec.containers.exists(c, c.missing == 'x' || c.name == 'app')",
	"object.spec.containers.all(c, c.missing == 'x' && c.name == 'nope')",
	"object.kind.foo == 1",
	"has(object.kind.foo)",
	"object.kind[0]",
	"has(object.spec.containers.image)",
	"object.spec.containers.image",
	"has(object.metadata.deletionTimestamp.seconds)",
	"object.metadata.deletionTimestamp.seconds",
	"object.metadata.name.all(c, true)",
	"size(object.spec.replicas) == 1",
	"object.metadata.name + '/' + object.metadata.namespace",
	"int(object.metadata.deletionGracePeriodSeconds) + 1 > 30",
	"string(object.spec.replicas) == '3'",
	"object.spec.replicas > 2.5",
	"object.spec.replicas == 3.0",
	"object.metadata.creationTimestamp < '2030'",
	"timestamp(object.metadata.creationTimestamp) < timestamp('2030-01-01T00:00:00Z')",
	"double(object.spec.replicas) / 2.0 > 1.0",
	"object.spec.replicas / 0 == 1",
	"object.metadata.labels.all(k, object.metadata.labels[k].size() < 64)",
	"[object.metadata.name, object.metadata.namespace].exists(s, s == 'shop')",
	"object.spec.containers.filter(c, has(c.ports)).size() == 1",
	"object.metadata.annotations['a'] == 'b'",
	"'proxy' in object.spec.containers.map(c, c.name)",
	"object.spec.containers[0].name == 'app' ? true : object.spec.missing",
	"object.spec.missing ? 1 : 2",
	"object.spec.containers[0].ports[0].containerPort == 8080u",
	"object.spec.containers[1.0].name",
	"object.spec.containers[-1]",
	"object.spec.containers['a']",
	"object.spec.containers.exists(c, c.ports.exists(p, p.containerPort > 8000))",
	"object.spec.containers.exists(c, object.spec.containers.exists(d, d.name != c.name && d.image == c.image))",
	"object.spec.containers.exists(object, object.name == 'app')",
	"object.status.conditions.exists(c, c.type == 'Ready' && c.status == 'True')",
	"object.data.exists(k, k == 'mode')",
	"size(object.data) == 1 && object.data.mode == 'fast'",
	"type(object.spec) == map",
	"{'a': object.kind}.a == 'Pod'",
	"object.spec.replicas.startsWith('3')",
	"object.metadata.name.endsWith(object.metadata.namespace)",
	"object.metadata.labels.contains('app')",
	"object.metadata.name.contains('7db') && !object.metadata.name.contains('x')",
	"!object.spec.replicas",
	"!object.spec.missing",
	"[true, 1, 'a', null, object.spec.missing].exists(x, x)",
	"[true, 1, 'a', null].all(x, !x)",
	// exists and all with a predicate that is not a bool, or fails, before and after the
	// element that decides them, and an exists whose range is not a list view.
	"[1, 'a', true].exists(x, x)",
	"[null, false].exists(x, x)",
	"['a', false, true].all(x, x)",
	"[true, 'a', true].all(x, x)",
	"[false, object.spec.missing, true].exists(x, x)",
	"[object.spec.missing, 1].exists(x, x)",
	"object.spec.containers.exists(c, c.name == 'proxy' || c.missing)",
	"object.spec.containers.all(c, c.name == 'app' && c.missing)",
	"object.spec.containers.exists(c, c.name)",
	"object.metadata.labels.all(k, object.metadata.labels[k])",
	"object.spec.containers.exists(c, c.ports.all(p, p.containerPort > 80) && c.name == 'app')",
	"object.spec.missing == 'x'",
	"object.spec.missing != 'x'",
	"object.metadata.name == 'web-7db6d8ff4d-abcde' && object.kind != 'Pod'",
	"object.metadata.labels == 'x'",
	"object.spec.containers.exists(c, c.name.endsWith('xy') || c.image.contains('envoy'))",
	"object.metadata.ownerReferences.exists(o, o.kind == 'ReplicaSet' && o.controller == true)",
	"!(object.spec.nope in [])",
	"object.metadata.name in []",
	"dyn(1000000000000000001) in [1e18]",
	"object.metadata.generation in [1e18, 2.5]",
	"object.spec.replicas in [3.0, 'x']",
	"object.spec.replicas in [3u, 4]",
	"object.metadata.namespace in ['shop', 1, true, null]",
	"object.metadata.annotations[object.spec.containers] == 'x'",
	"object.metadata.labels[object.metadata.ownerReferences] == 'x'",
	"object.spec.containers[object.spec.nodeName == 'node-17'] == 'x'",
}

// TestNativeProgramMatchesCEL: a planned program gives cel-go's value on every object, or
// bails; it plans the shapes filters use, and bails only where it should.
func TestNativeProgramMatchesCEL(t *testing.T) {
	objs := viewObjects()
	objs = append(objs, unstructuredOf(t, objs)...)
	cases := nativeCases(t)
	evaluated := 0
	for _, c := range cases {
		answered := 0
		for _, o := range objs {
			want, wantErr, got, gotErr, ok := evalNative(t, c.prg, c.native, o)
			if !ok {
				continue
			}
			answered++
			if (wantErr == nil) != (gotErr == nil) {
				t.Errorf("%s on %T: cel-go gives %v (%v), native %v (%v)", c.expr, o, want, wantErr, got, gotErr)
				continue
			}
			if wantErr == nil && !reflect.DeepEqual(want, got) {
				t.Errorf("%s on %T: cel-go gives %v, native %v", c.expr, o, want, got)
			}
		}
		evaluated += answered
		if answered == 0 {
			t.Errorf("%s: planned, and bails on every object", c.expr)
		}
	}
	// Every filter shape above is planned but a few: those that must not be.
	for _, expr := range filterExprs {
		ast, _ := celEnv.Compile(expr)
		_, err := planNative(ast)
		if (err == nil) == notPlanned[expr] {
			t.Errorf("%s: planned %v, want %v (%v)", expr, err == nil, !notPlanned[expr], err)
		}
	}
	t.Logf("%d of %d expressions planned; %d evaluations compared", len(cases), len(viewExprs)+len(filterExprs), evaluated)
}

// notPlanned are the filter shapes nativeProgram leaves to cel-go.
var notPlanned = map[string]bool{
	"type(object.spec) == map":      true, // a type name
	"{'a': object.kind}.a == 'Pod'": true, // a map literal
}

// evalNative evaluates obj's view with cel-go's program and the native one; ok is false when
// the native evaluation bailed. The native one must read no more values than cel-go does:
// the bound of an untracked evaluation rests on it.
func evalNative(t testing.TB, prg cel.Program, np *nativeProgram, obj runtime.Object) (want any, wantErr error, got any, gotErr error, ok bool) {
	st := newEvalState(1<<20, 1<<20)
	defer st.release()
	object, err := objectValue(obj, st)
	if err != nil {
		t.Fatalf("%T: %v", obj, err)
	}
	st.act.object = object
	wantVal, _, wantErr := prg.Eval(&st.act)
	celReads := st.work
	st.work = 0
	gotVal, ok := np.eval(object)
	if ok && st.work > celReads {
		t.Fatalf("%T: the native program read %d values, cel-go %d", obj, st.work, celReads)
	}
	// At a small bound, which a Container and a PodSpec pass (each has more fields): the native program reads
	// nothing over the bound that cel-go does not, and refuses what cel-go would.
	small := newEvalState(16, 1<<20)
	defer small.release()
	if object, err := objectValue(obj, small); err == nil && !small.over {
		small.act.object = object
		_, _, _ = prg.Eval(&small.act)
		celOver, celWork := small.over, small.work
		small.over, small.work = false, 0
		if _, nok := np.eval(object); nok {
			if small.over && !celOver || celWork == small.work && small.over != celOver {
				t.Fatalf("%T at a bound of 16: native over %v after %d reads, cel-go over %v after %d", obj, small.over, small.work, celOver, celWork)
			}
		}
	}
	if wantErr == nil {
		want = normal(wantVal) // before release: views read the object through st
	}
	if err, isErr := gotVal.(*types.Err); isErr {
		gotErr = err
	} else if ok {
		got = normal(gotVal)
	}
	return want, wantErr, got, gotErr, ok
}

// TestNativeFilterFallsBack: a filter whose native program bails on an object answers as
// cel-go does for it, and one on a value over the bound still runs tracked.
func TestNativeFilterFallsBack(t *testing.T) {
	// size() of an int has no overload, unless the int were a receiver: the native program
	// leaves that to cel-go.
	f, err := CompileFilter("size(object.metadata.generation) == 0 || object.metadata.name == 'p'")
	if err != nil {
		t.Fatal(err)
	}
	if f.native == nil {
		t.Fatal("the filter is not planned natively")
	}
	p := &corev1.Pod{}
	p.Kind, p.Name, p.Generation = "Pod", "p", 3
	object, err := objectValue(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := f.native.eval(object); ok {
		t.Fatal("the native program does not bail on size() of an int")
	}
	if b := f.Bind(); !b.Matches(p) {
		t.Error("a bailed evaluation does not pass where cel-go says it does")
	}
	g, err := CompileFilter("object.metadata.name.startsWith('p')")
	if err != nil || g.native == nil {
		t.Fatalf("not planned natively: %v", err)
	}
	long := &corev1.Pod{}
	long.Name = "p" + string(make([]byte, g.bound))
	if b := g.Bind(); !b.Matches(long) || b.Err() != nil {
		t.Errorf("a name over the bound: %v (%v)", b.Matches(long), b.Err())
	}
	// The native program itself refuses the name, as a view does: the evaluation is over.
	st := newEvalState(g.bound, FilterCostLimit/2)
	defer st.release()
	object, err = objectValue(long, st)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := g.native.eval(object); !st.over || v == types.True {
		t.Errorf("a name over the bound read untracked: %v, over %v", v, st.over)
	}
}

// TestNativeBailKeepsItsReads: when a native evaluation bails, cel-go evaluates the object
// within what is left of the same bound on reads; the native program's reads stay counted.
func TestNativeBailKeepsItsReads(t *testing.T) {
	// The exists reads every container's image, natively, then size() of an int bails.
	f, err := CompileFilter("object.spec.containers.exists(c, c.image == 'x') || size(object.metadata.generation) == 0")
	if err != nil || f.native == nil {
		t.Fatalf("not planned natively: %v", err)
	}
	p := &corev1.Pod{}
	p.Kind, p.Name, p.Generation = "Pod", "p", 3
	for i := range 50 {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: fmt.Sprint("c", i), Image: "img"})
	}
	readsOf := func(eval func(object ref.Val, st *evalState)) int {
		st := newEvalState(f.bound, math.MaxInt)
		defer st.release()
		object, err := objectValue(p, st)
		if err != nil {
			t.Fatal(err)
		}
		eval(object, st)
		return st.work
	}
	native := readsOf(func(object ref.Val, _ *evalState) {
		if _, ok := f.native.eval(object); ok {
			t.Fatal("the native program does not bail on size() of an int")
		}
	})
	both := readsOf(func(object ref.Val, st *evalState) {
		f.native.eval(object)
		st.act.object = object
		_, _, _ = f.fast.Eval(&st.act)
	})
	interpreted := both - native
	if native < 100 || interpreted < 100 {
		t.Fatalf("reads: %d native, %d by cel-go; want each to read the 50 images", native, interpreted)
	}
	for _, tc := range []struct {
		reads  int
		within bool
	}{
		{both, true},             // both evaluations fit
		{both - 1, false},        // the native reads and cel-go's together do not
		{interpreted + 1, false}, // cel-go's alone would
	} {
		b := f.Bind()
		b.reads = tc.reads
		if pass, ok := b.matchesFast(p); ok != tc.within || pass {
			t.Errorf("bounded at %d reads (%d native, %d by cel-go): within %v (passes %v), want within %v",
				tc.reads, native, interpreted, ok, pass, tc.within)
		}
	}
}

type nativeCase struct {
	expr   string
	prg    cel.Program
	native *nativeProgram
}

// nativeCases are viewExprs and filterExprs that plan natively, with cel-go's program of each.
func nativeCases(t testing.TB) []nativeCase {
	var out []nativeCase
	for _, expr := range append(append([]string{}, viewExprs...), filterExprs...) {
		ast, iss := celEnv.Compile(expr)
		if iss.Err() != nil {
			t.Fatalf("%s: %v", expr, iss.Err())
		}
		prg, err := celEnv.Program(ast, cel.EvalOptions(cel.OptOptimize))
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		if np, err := planNative(ast); err == nil {
			out = append(out, nativeCase{expr, prg, np})
		}
	}
	return out
}

// TestNativeProgramRecovers: a panic inside an evaluation bails it, as cel-go's Eval recovers
// one, and leaves the frame pool usable.
func TestNativeProgramRecovers(t *testing.T) {
	p := &nativeProgram{root: func(*nframe) ref.Val { panic("a value's method failed") }, slots: 2}
	if _, ok := p.eval(types.True); ok {
		t.Error("a panicking evaluation is trusted")
	}
	q := &nativeProgram{root: func(fr *nframe) ref.Val { return fr.object }, slots: 2}
	if v, ok := q.eval(types.True); !ok || v != types.True {
		t.Errorf("after a panic: %v, %v", v, ok)
	}
}

// TestNativeIndexMatchesCEL: a custom CEL index gives the same values through its native
// program as through cel-go's alone, on every object and expression that plans.
func TestNativeIndexMatchesCEL(t *testing.T) {
	objs := viewObjects()
	objs = append(objs, unstructuredOf(t, objs)...)
	indexed := 0
	for _, c := range nativeCases(t) {
		native, interpreted := celIndexFunc(c.prg, c.native), celIndexFunc(c.prg, nil)
		for _, o := range objs {
			got, err := native(o)
			want, werr := interpreted(o)
			if err != nil || werr != nil {
				t.Fatalf("%s on %T: %v, %v", c.expr, o, err, werr)
			}
			slices.Sort(got) // a map's keys come in any order through cel-go's own maps
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("%s on %T: native %q, cel-go %q", c.expr, o, got, want)
			}
			if len(got) > 0 {
				indexed++
			}
		}
	}
	if indexed < 100 {
		t.Errorf("only %d objects indexed by any expression: the comparison tests little", indexed)
	}
}
