package index

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/cel-go/common/types"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func filterPod(name string, images ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{"app": name}}}
	for _, im := range images {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: im, Image: im})
	}
	return p
}

// TestFilterMatches: a where expression judges typed and unstructured objects alike; a field
// an object lacks makes it fail, never an error.
func TestFilterMatches(t *testing.T) {
	nginx, envoy := filterPod("a", "nginx:1.27", "envoy:1"), filterPod("b", "envoy:1")
	u := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "c"},
		"spec": map[string]any{"containers": []any{map[string]any{"image": "nginx:1.25"}}}}}
	for expr, want := range map[string][]bool{
		"object.spec.containers.exists(c, c.image.startsWith('nginx:'))": {true, false, true},
		"object.metadata.name == 'b'":                                    {false, true, false},
		"object.metadata.labels.app == 'a'":                              {true, false, false}, // c has no labels: fails
		"has(object.metadata.labels) && 'app' in object.metadata.labels": {true, true, false},
		"size(object.spec.containers) > 1":                               {true, false, false},
		"object.status.phase == 'Running'":                               {false, false, false}, // no status at all
	} {
		f, err := CompileFilter(expr)
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		b := f.Bind()
		for i, obj := range []any{nginx, envoy, u} {
			if got := b.Matches(obj); got != want[i] {
				t.Errorf("%s on object %d: %v, want %v", expr, i, got, want[i])
			}
			if vals := b.Values(obj); (len(vals) == 1 && vals[0] == "true") != want[i] {
				t.Errorf("%s on object %d: Values %v", expr, i, vals)
			}
		}
		if b.Err() != nil {
			t.Errorf("%s: Err %v after cheap evaluations", expr, b.Err())
		}
	}
}

// TestFilterRefuses: a syntax or type error names its line and column; an expression that is
// not a bool is refused; an evaluation over the cost limit fails and is remembered.
func TestFilterRefuses(t *testing.T) {
	for expr, want := range map[string]string{
		"object.metadata.name ==":         "<input>:1:24",
		"object.spec.containers.exists(c": "<input>:1:",
		"nosuch.field == 1":               "undeclared reference to 'nosuch'",
		"1 + 1":                           "want bool",
		"'x'":                             "want bool",
		"":                                "expression is required",
		"object.metadata.name + 1 == 2":   "", // dyn: a runtime error, so the object fails
	} {
		_, err := CompileFilter(expr)
		switch {
		case want == "" && err != nil:
			t.Errorf("%q: %v, want it compiled", expr, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%q: %v, want an error with %q", expr, err, want)
		}
	}
	// A quadratic walk over a long list runs past the limit.
	var many []string
	for range 3000 {
		many = append(many, "x")
	}
	big := filterPod("big", many...)
	f, err := CompileFilter("object.spec.containers.all(a, object.spec.containers.all(b, a.image == b.image))")
	if err != nil {
		t.Fatal(err)
	}
	b := f.Bind()
	if b.Matches(big) {
		t.Error("an evaluation past the cost limit passed")
	}
	if err := b.Err(); err == nil || !strings.Contains(err.Error(), "exceeds the limit") {
		t.Errorf("Err after an evaluation past the limit: %v", err)
	}
	// Another request's binding has its own state.
	if f.Bind().Err() != nil {
		t.Error("a fresh binding carries another request's failure")
	}
	small := filterPod("small", "x", "x")
	if !b.f.Bind().Matches(small) {
		t.Error("a cheap evaluation of the same filter failed")
	}
	// An answer's binding refuses the rest at once: the request is a 400 anyway.
	if b.Matches(small) {
		t.Error("an answer's binding passed an object after it failed")
	}
	// A watch's binding judges each event on its own, and keeps no failure.
	w := f.BindWatch()
	if w.Matches(big) || !w.Matches(small) || w.Err() != nil {
		t.Errorf("a watch's binding: big %v, small %v, Err %v; want false, true, nil", w.Matches(big), w.Matches(small), w.Err())
	}
}

// TestFilterConcurrent: one binding serves a request's concurrent evaluations (members are
// read in parallel).
func TestFilterConcurrent(t *testing.T) {
	f, err := CompileFilter("object.metadata.name.startsWith('p')")
	if err != nil {
		t.Fatal(err)
	}
	b := f.Bind()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for range 200 {
				if !b.Matches(filterPod("p" + string(rune('a'+i)))) {
					t.Error("a matching object failed")
					return
				}
			}
		})
	}
	wg.Wait()
}

// FuzzWhere: any where text either compiles or is refused with an error; a compiled one judges
// typed and unstructured objects without a panic, within the cost limit.
func FuzzWhere(f *testing.F) {
	for _, seed := range []string{
		"object.spec.containers.exists(c, c.image.startsWith('nginx:'))", "object.metadata.name == 'a'",
		"has(object.metadata.labels) && object.metadata.labels.app == 'x'", "size(object.spec.containers) > 1",
		"object.metadata.name ==", "1 + 1", "object.spec.containers.all(a, object.spec.containers.all(b, a == b))",
		"object.metadata.annotations['x'] in ['a', 'b']", "int(object.metadata.resourceVersion) > 3",
	} {
		f.Add(seed)
	}
	objs := []any{filterPod("a", "nginx:1", "envoy:2"), filterPod("b"),
		&unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "u", "labels": map[string]any{"app": "x"}}}}}
	f.Fuzz(func(t *testing.T, expr string) {
		fl, err := CompileFilter(expr)
		if err != nil {
			if err.Error() == "" {
				t.Fatalf("%q: an empty error", expr)
			}
			return
		}
		b := fl.Bind()
		for _, o := range objs {
			b.Matches(o)
		}
	})
}

// TestRecursivePathsIndexNothingUnexported: a recursive JSONPath walks a typed object's
// unexported fields (a Quantity's, a Time's); they index nothing, and nothing panics.
func TestRecursivePathsIndexNothingUnexported(t *testing.T) {
	p := filterPod("q", "nginx")
	p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")}
	p.CreationTimestamp = metav1.Now()
	for _, path := range []string{"...", "{..}", "..cpu", "$..*", "{.metadata.creationTimestamp..*}"} {
		f, err := Compile(Spec{Name: "x", JSONPath: path})
		if err != nil {
			continue // refused: fine
		}
		if _, err := f(p); err != nil {
			t.Errorf("%s: %v", path, err)
		}
	}
}

// TestJSONPathRecoversAfterAFailedRun: an object a path fails on does not change what the
// path gives the next object (a failed run inside a range leaves its evaluator changed; it is
// not used again).
func TestJSONPathRecoversAfterAFailedRun(t *testing.T) {
	f, err := Compile(Spec{Name: "x", JSONPath: "{range .items[*]}{.x[0]}{end}"})
	if err != nil {
		t.Fatal(err)
	}
	good := &unstructured.Unstructured{Object: map[string]any{"items": []any{map[string]any{"x": []any{"a"}}}}}
	bad := &unstructured.Unstructured{Object: map[string]any{"items": []any{map[string]any{"x": "not a list"}}}}
	first, _ := f(good)
	_, _ = f(bad)
	again, _ := f(good)
	if len(first) != 1 || first[0] != "a" || len(again) != 1 || again[0] != "a" {
		t.Errorf("a good object gives %v, then after a bad one %v; want [a] both times", first, again)
	}
}

// TestJSONPathReadsTimesAndQuantitiesAsJSON: a path to a Time or a Quantity of a typed object
// gives what the object's JSON holds (RFC 3339, "250m"), the same as of the unstructured
// object, so that a sort, a summary or an index by creationTimestamp or a limit reads the same
// values of both (a Quantity as its text: "250m", which sorts as text, not as a number).
func TestJSONPathReadsTimesAndQuantitiesAsJSON(t *testing.T) {
	p := filterPod("q", "nginx")
	p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")}
	p.CreationTimestamp = metav1.Date(2026, 11, 27, 4, 5, 6, 0, time.UTC)
	for path, want := range map[string]string{
		"{.metadata.creationTimestamp}":              "2026-11-27T04:05:06Z",
		"{.spec.containers[0].resources.limits.cpu}": "250m",
	} {
		f, err := Compile(Spec{Name: "x", JSONPath: path})
		if err != nil {
			t.Fatal(err)
		}
		for kind, obj := range map[string]any{"typed": p, "unstructured": unstr(t, p)} {
			if got, err := f(obj); err != nil || len(got) != 1 || got[0] != want {
				t.Errorf("%s of the %s Pod: %q, %v; want %q", path, kind, got, err, want)
			}
		}
	}
}

// trackedCost evaluates f's tracked program on obj: its value and actual cost.
func trackedCost(t *testing.T, f *Filter, obj any) (bool, uint64, error) {
	t.Helper()
	object, err := objectValue(obj, nil)
	if err != nil {
		t.Fatal(err)
	}
	val, det, err := f.prg.Eval(&objectActivation{object: object})
	return val == types.True, *det.ActualCost(), err
}

// TestFilterFastPath: a filter whose estimated cost at some size bound is within the limit
// evaluates untracked objects whose values are all within the bound, with the answer the
// tracked program gives, at a cost the estimate covers; an object with a larger value is
// evaluated tracked.
func TestFilterFastPath(t *testing.T) {
	var many []string
	for range 100 {
		many = append(many, "x")
	}
	long := filterPod("long")
	long.Labels["note"] = strings.Repeat("n", 70_000)
	objs := append(viewObjects(), filterPod("wide", many...), long, unstr(t, benchPod()))
	fastOnes := 0
	for _, expr := range []string{
		"object.spec.containers.exists(c, c.image.startsWith('registry'))",
		"object.metadata.name == 'web-7db6d8ff4d-abcde'",
		"object.metadata.labels.exists(k, object.metadata.labels[k].contains('n'))",
		"object.spec.containers.all(a, object.spec.containers.all(b, a.image == b.image))",
		"has(object.status) && object.status.phase == 'Running'",
		"size(object.metadata.labels) > 2 && 'app' in object.metadata.labels",
		"object.metadata.labels.all(k, k + object.metadata.labels[k] != '')",
	} {
		f, err := CompileFilter(expr)
		if err != nil {
			t.Fatal(err)
		}
		if f.fast == nil {
			t.Errorf("%s: no size bound keeps its estimate within the limit", expr)
			continue
		}
		ast, _ := celEnv.Compile(expr)
		est, err := celEnv.EstimateCost(ast, sizeEstimator(f.bound))
		if err != nil || 2*est.Max > FilterCostLimit {
			t.Fatalf("%s: bound %d estimated at %v (%v)", expr, f.bound, est, err)
		}
		b := f.BindWatch()
		objs := objs
		if f.bound <= 1024 {
			objs = append(objs, atBound(f.bound))
		}
		for _, o := range objs {
			want, cost, err := trackedCost(t, f, o)
			if err != nil {
				want = false
			}
			pass, ok := b.matchesFast(o)
			if !ok {
				continue // a value over the bound: evaluated tracked
			}
			fastOnes++
			if pass != want {
				t.Errorf("%s on %T %v: untracked %v, tracked %v", expr, o, name(o), pass, want)
			}
			if cost > 2*est.Max {
				t.Errorf("%s on %T %v: cost %d, over twice the estimate %d at bound %d", expr, o, name(o), cost, est.Max, f.bound)
			}
			if b.Matches(o) != want {
				t.Errorf("%s on %T %v: Matches disagrees with the tracked program", expr, o, name(o))
			}
		}
		if _, ok := b.matchesFast(objs[len(objs)-1]); f.bound <= 1024 && !ok {
			t.Errorf("%s: the Pod at bound %d is not evaluated untracked", expr, f.bound)
		}
		if _, ok := b.matchesFast(long); ok && strings.Contains(expr, "labels.all") {
			t.Errorf("%s: a label of 70,000 bytes is within bound %d", expr, f.bound)
		}
	}
	if fastOnes == 0 {
		t.Fatal("no evaluation took the untracked path")
	}
}

// atBound is a Pod whose lists, maps and strings are as large as bound allows: the
// evaluation the estimate is for.
func atBound(bound int) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: strings.Repeat("n", bound), Labels: map[string]string{}}}
	for i := range bound - 16 { // metadata has 16 fields, within the bound too
		p.Labels[fmt.Sprintf("%0*d", bound, i)] = strings.Repeat("v", bound)
	}
	for range bound {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: strings.Repeat("c", bound), Image: strings.Repeat("i", bound)})
	}
	return p
}

func name(o any) string {
	if m, ok := o.(interface{ GetName() string }); ok {
		return m.GetName()
	}
	return ""
}

// TestFilterBudgetCountsSampledCost: a request whose evaluations run untracked still spends
// its budget, at the cost the tracked program measures (one evaluation in costSample, counted
// costSample times).
func TestFilterBudgetCountsSampledCost(t *testing.T) {
	f, err := CompileFilter("object.spec.containers.all(a, object.spec.containers.all(b, a.image == b.image))")
	if err != nil {
		t.Fatal(err)
	}
	p := filterPod("p", "x", "x", "x", "x", "x", "x", "x", "x")
	_, cost, err := trackedCost(t, f, p)
	if err != nil || cost == 0 {
		t.Fatalf("tracked cost %d, %v", cost, err)
	}
	b := f.Bind()
	b.budget = 2000 * cost // two thousand evaluations' worth
	evals := 0
	for b.Err() == nil && evals < 20_000 {
		if !b.Matches(p) && b.Err() == nil {
			t.Fatal("a passing object failed within the budget")
		}
		evals++
	}
	if err := b.Err(); err == nil || !strings.Contains(err.Error(), "budget") {
		t.Fatalf("after %d evaluations: Err %v, want the budget spent", evals, err)
	}
	// One evaluation in costSample at random counts costSample times: the budget is spent
	// after about 2,000 (a standard deviation of 360; these bounds are 4 and 8 of them away).
	if evals < 500 || evals > 5000 {
		t.Errorf("the budget of 2,000 evaluations was spent after %d", evals)
	}
}

// TestFilterUntrackedStaysWithinTheLimit: objects and expressions made to cost more than CEL's
// estimate says (a field of a dynamic value is estimated free, and costs 1 at run time; a
// list concatenated hands out values the views did not read; equality over whole maps): an
// evaluation that runs untracked costs, tracked, within the limit, and a watch's verdict is
// the tracked program's (an object past the limit does not pass).
func TestFilterUntrackedStaysWithinTheLimit(t *testing.T) {
	deep := func(op, join string) string {
		var terms []string
		for i := range 8 {
			terms = append(terms, fmt.Sprintf("object.spec.template.spec.securityContext.seLinuxOptions.user.size() %s %d", op, i))
		}
		return strings.Join(terms, join)
	}
	annotated := func(n int) *appsv1.Deployment {
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Annotations: map[string]string{}, Labels: map[string]string{}}}
		d.Spec.Template.Spec.SecurityContext = &corev1.PodSecurityContext{SELinuxOptions: &corev1.SELinuxOptions{User: "system_u"}}
		for i := range n {
			d.Annotations[fmt.Sprint("a", i)] = ""
		}
		for i := range 64 {
			d.Labels[fmt.Sprint("l", i)] = "v"
		}
		return d
	}
	longArg := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: map[string]string{}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Args: []string{strings.Repeat("ab", 400_000)}}}}}
	for i := range 60 {
		longArg.Labels[fmt.Sprint("l", i)] = "v"
	}
	labeled := filterPod("labeled", "a", "b")
	for i := range 60 {
		labeled.Labels[fmt.Sprint("l", i)] = "v"
	}
	untracked := 0
	for _, tc := range []struct {
		expr  string
		obj   any
		heavy bool // evaluations to the limit: a minute under the race detector
	}{
		{"object.metadata.annotations.exists(k, " + deep("==", " || ") + ")", annotated(16384), true},
		{"object.metadata.annotations.all(k, " + deep("!=", " && ") + ")", annotated(16384), true},
		{"object.metadata.annotations.all(k, " + deep("!=", " && ") + ")", annotated(100), false},
		{"object.metadata.labels.exists(k, (object.spec.containers[0].args + []).exists(a, a.matches('^(a|b)*c$')))", longArg, true},
		{"object.metadata.labels.all(k, object.metadata.labels.all(j, object != {}))", labeled, false},
		{"object.metadata.labels.all(k, object.metadata.labels.all(j, object.spec == object.spec))", labeled, false},
		{"object.metadata.labels.all(k, object.metadata.labels.all(j, !('x' in object.spec.containers)))", labeled, false},
		{"object.metadata.labels.all(k, [object.spec] + [object.metadata] != [])", labeled, false},
	} {
		if tc.heavy && raceEnabled {
			t.Logf("race detector on: %.60s… runs without it (make test)", tc.expr)
			continue
		}
		f, err := CompileFilter(tc.expr)
		if err != nil {
			t.Fatal(err)
		}
		want, cost, err := trackedCost(t, f, tc.obj)
		if err != nil {
			want = false
		}
		if f.fast != nil {
			if _, ok := f.BindWatch().matchesFast(tc.obj); ok {
				untracked++
				if cost > FilterCostLimit {
					t.Errorf("%.60s…: evaluated untracked at a tracked cost of %d, past the limit", tc.expr, cost)
				}
			}
		}
		if got := f.BindWatch().Matches(tc.obj); got != want {
			t.Errorf("%.60s…: a watch's verdict %v, the tracked program's %v (cost %d, %v)", tc.expr, got, want, cost, err)
		}
	}
	if untracked == 0 {
		t.Fatal("no case ran untracked: the test tests nothing")
	}
}

// TestFilterTrackedReadsAreBounded: a tracked evaluation (an object over the untracked bound)
// whose CEL cost stays low but which reads a large list whole again and again (a
// concatenation inside two loops: 20M reads) stops at maxTrackedReads (2M), and the request is
// refused as past the limit.
func TestFilterTrackedReadsAreBounded(t *testing.T) {
	p := filterPod("wide")
	for i := range 100 {
		p.Labels[fmt.Sprint("l", i)] = "v"
	}
	for i := range 2000 {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: fmt.Sprint("c", i), Image: "x"})
	}
	f, err := CompileFilter("object.metadata.labels.all(k, object.metadata.labels.all(j, object.spec.containers + [] != []))")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := f.BindWatch().matchesFast(p); ok {
		t.Fatal("2,000 containers were read untracked")
	}
	b := f.Bind()
	if b.Matches(p) {
		t.Error("an evaluation past the limit's worth of reads passed")
	}
	if err := b.Err(); err == nil || !strings.Contains(err.Error(), "exceeds the limit") {
		t.Errorf("Err %v, want the limit exceeded", err)
	}
	if f.BindWatch().Matches(p) {
		t.Error("a watch passed an evaluation past the limit's worth of reads")
	}
}

// TestPooledStatesDropLargeSlabs: a state keeps room for at most maxSlab views of a kind.
func TestPooledStatesDropLargeSlabs(t *testing.T) {
	if got := reuse(make([]structVal, 10, maxSlab+1)); got != nil {
		t.Errorf("a slab of %d kept", maxSlab+1)
	}
	if got := reuse(make([]structVal, 10, maxSlab)); cap(got) != maxSlab || len(got) != 0 {
		t.Errorf("a slab of %d: cap %d, len %d; want it kept, empty", maxSlab, cap(got), len(got))
	}
}
