package index

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/randfill"
)

// probeKey is a named string type keying a map.
type probeKey string

type probeInner struct {
	A string `json:"a"`
	B int    `json:"b,omitempty"`
}

type ProbeEmbed struct {
	E      string `json:"e"`
	Shadow string `json:"shadow"`
}

// viewProbe has a field of every shape the converter treats on its own.
type viewProbe struct {
	metav1.TypeMeta `json:",inline"`
	*ProbeEmbed                                       // no tag: inlined through a pointer
	Shadow          string                            `json:"shadow,omitempty"` // hides ProbeEmbed's when set
	NoTag           string                            // named by its Go name
	EmptyTag        string                            `json:",omitempty"`
	U               uint32                            `json:"u"`
	F32             float32                           `json:"f32"`
	Bytes           []byte                            `json:"bytes"`
	Iface           any                               `json:"iface"`
	Ptr             *probeInner                       `json:"ptr"`
	PtrOmit         *probeInner                       `json:"ptrOmit,omitempty"`
	Zero            probeInner                        `json:"zero,omitzero"`
	Named           map[probeKey]int                  `json:"named"`
	Nested          []map[string][]probeInner         `json:"nested"`
	EmptyList       []string                          `json:"emptyList"`
	EmptyOmit       []string                          `json:"emptyOmit,omitempty"`
	Skip            string                            `json:"-"`
	SkipToo         string                            `json:"-,"` //nolint:staticcheck // the converter skips "-," too: tested on purpose
	Time            metav1.Time                       `json:"time"`
	TimePtr         *metav1.Time                      `json:"timePtr"`
	Q               resource.Quantity                 `json:"q"`
	IOS             intstr.IntOrString                `json:"ios"`
	IOSPtr          *intstr.IntOrString               `json:"iosPtr,omitempty"`
	Raw             runtime.RawExtension              `json:"raw"`
	Dur             metav1.Duration                   `json:"dur"`
	Deep            map[string]map[string]*probeInner `json:"deep"`
}

func (p *viewProbe) DeepCopyObject() runtime.Object { c := *p; return &c }

func viewObjects() []runtime.Object {
	ctl := true
	grace := int64(30)
	now := metav1.Unix(1_700_000_000, 0)
	pod := benchPod()
	pod.TypeMeta = metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"}
	pod.CreationTimestamp = now
	pod.DeletionTimestamp = &now
	pod.DeletionGracePeriodSeconds = &grace
	pod.Spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}}
	pod.Spec.Containers[0].ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromString("http")}}}
	pod.Spec.Containers[1].Env = []corev1.EnvVar{{Name: "A", Value: ""}, {Name: "B", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", Ready: true, RestartCount: 3}}
	replicas := int32(3)
	dep := &appsv1.Deployment{TypeMeta: metav1.TypeMeta{Kind: "Deployment", APIVersion: "apps/v1"},
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", OwnerReferences: []metav1.OwnerReference{{Kind: "X", Name: "x", Controller: &ctl}}},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Strategy: appsv1.DeploymentStrategy{RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &intstr.IntOrString{IntVal: 2}}},
			Template: pod2Template(pod)}}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "svc"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}, {Port: 443, TargetPort: intstr.FromString("https")}}}}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}, Data: map[string][]byte{"k": []byte("v\x00\xff"), "empty": {}, "nil": nil}}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg", Labels: map[string]string{}}, Data: map[string]string{"mode": "fast"}}
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "j"}}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Status: corev1.NodeStatus{
		Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("16Gi")}}}
	probe := &viewProbe{TypeMeta: metav1.TypeMeta{Kind: "Probe"}, ProbeEmbed: &ProbeEmbed{E: "e", Shadow: "embedded"},
		NoTag: "nt", EmptyTag: "et", U: 7, F32: 1.5, Bytes: []byte("hi"), Iface: map[string]any{"x": int64(1)}, Ptr: &probeInner{A: "a"},
		Named: map[probeKey]int{"k": 1}, Nested: []map[string][]probeInner{{"l": {{A: "x", B: 2}}}, nil}, EmptyList: []string{},
		EmptyOmit: []string{}, Skip: "s", SkipToo: "s", Time: now, Q: resource.MustParse("250m"), IOS: intstr.FromInt32(5),
		IOSPtr: &intstr.IntOrString{Type: intstr.String, StrVal: "p"}, Raw: runtime.RawExtension{Raw: []byte(`{"r":[1,"2"]}`)},
		Dur: metav1.Duration{Duration: 1500_000_000}, Deep: map[string]map[string]*probeInner{"a": {"b": nil, "c": {A: "c"}}}}
	shadowed := &viewProbe{ProbeEmbed: &ProbeEmbed{Shadow: "embedded"}, Shadow: "outer"}
	empty := &viewProbe{}
	return []runtime.Object{pod, dep, svc, secret, cm, job, node, probe, shadowed, empty, &corev1.Pod{}}
}

func pod2Template(p *corev1.Pod) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{ObjectMeta: p.ObjectMeta, Spec: p.Spec}
}

// viewExprs read every kind of value, every operation on maps and lists, and presence.
var viewExprs = []string{
	"object",
	"object.metadata",
	"object.kind",
	"has(object.spec)",
	"has(object.spec.nodeName)",
	"has(object.metadata.deletionTimestamp)",
	"object.metadata.deletionTimestamp == null",
	"object.metadata.creationTimestamp",
	"object.metadata.deletionGracePeriodSeconds + 1",
	"object.metadata.labels",
	"size(object.metadata.labels)",
	"'app' in object.metadata.labels",
	"object.metadata.labels.all(k, k.size() > 2)",
	"object.metadata.labels == {'app': 'web', 'tier': 'frontend', 'team': 'payments', 'pod-template-hash': '7db6d8ff4d'}",
	"object.metadata.ownerReferences[0].controller",
	"object.metadata.ownerReferences[5]",
	"object.spec.containers.exists(c, c.image.startsWith('registry'))",
	"object.spec.containers.map(c, c.name)",
	"object.spec.containers.filter(c, has(c.ports)).size()",
	"object.spec.containers[0].resources.requests.cpu",
	"object.spec.containers[0].ports[0].containerPort * 2",
	"object.spec.containers[0].readinessProbe.httpGet.port",
	"object.spec.containers[1].env",
	"object.spec.containers[1].env.map(e, has(e.value))",
	"object.spec.containers + []",
	"[1] + object.spec.containers.map(c, 1)",
	"object.spec.containers[0] in object.spec.containers",
	"object.spec == object.spec",
	"object == object",
	"size(object)",
	"object.map(k, k).exists(k, k == 'spec')",
	"object.all(k, k != 'kind' || object[k] != '')",
	"type(object.spec) == map",
	"type(object.spec.containers) == list",
	"object.status.conditions.filter(c, c.status == 'True').size()",
	"object.status.containerStatuses[0].restartCount",
	"object.status.capacity.memory",
	"object.spec.replicas",
	"object.spec.selector.matchLabels.app",
	"object.spec.strategy.rollingUpdate.maxSurge",
	"object.spec.template.spec.containers.map(c, c.image)",
	"object.spec.ports.map(p, p.targetPort)",
	"object.data",
	"object.data.k",
	"object.data['nil']",
	"has(object.data.empty)",
	"object.e", "object.shadow", "object.NoTag", "object.EmptyTag", "has(object.Skip)", "object.u + 1",
	"object.f32", "object.bytes", "object.iface.x", "object.ptr", "has(object.ptrOmit)", "has(object.zero)",
	"object.named", "object.nested", "object.nested[0].l[0].b", "object.emptyList", "has(object.emptyOmit)",
	"has(object.SkipToo)", "object.time", "object.timePtr", "object.q", "object.ios", "object.iosPtr", "object.raw",
	"object.raw.r[1]", "object.dur", "object.deep", "object.deep.a.b == null", "object.deep.a.c.a",
	"object.spec[1]", "object.metadata.labels[1]", "1 in object.metadata.labels",
}

// normal is v as plain data to compare: maps and lists by their entries, whatever their kind.
func normal(v ref.Val) any {
	switch x := v.(type) {
	case traits.Mapper:
		out := map[string]any{}
		for it := x.Iterator(); it.HasNext() == types.True; {
			k := it.Next()
			out[fmt.Sprint(k.Value())] = normal(x.Get(k))
		}
		return out
	case traits.Lister:
		var out []any
		for it := x.Iterator(); it.HasNext() == types.True; {
			out = append(out, normal(it.Next()))
		}
		return out
	}
	return fmt.Sprintf("%s:%v", v.Type().TypeName(), v.Value())
}

// evalBoth evaluates prg on obj converted whole and through a view.
func evalBoth(t testing.TB, prg cel.Program, obj runtime.Object) (whole, view ref.Val, wholeErr, viewErr error) {
	data, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatalf("%T: %v", obj, err)
	}
	whole, _, wholeErr = prg.Eval(map[string]any{"object": data})
	object, err := objectValue(obj, nil)
	if err != nil {
		t.Fatalf("%T: %v", obj, err)
	}
	view, _, viewErr = prg.Eval(&objectActivation{object: object})
	// The same through bounded views (a filter's untracked evaluation), within their bounds.
	st := newEvalState(1<<20, 1<<20)
	defer st.release()
	bounded, err := objectValue(obj, st)
	if err != nil {
		t.Fatalf("%T: %v", obj, err)
	}
	st.act.object = bounded
	got, _, gotErr := prg.Eval(&st.act)
	if st.over {
		t.Fatalf("%T: a small object is over generous bounds", obj)
	}
	if (gotErr == nil) != (viewErr == nil) || gotErr == nil && !reflect.DeepEqual(normal(got), normal(view)) {
		t.Fatalf("%T: bounded views give %v (%v), unbounded %v (%v)", obj, got, gotErr, view, viewErr)
	}
	return whole, view, wholeErr, viewErr
}

// TestCELViewMatchesConversion: an expression reads a typed object through its view exactly
// as it reads the object converted whole (runtime.DefaultUnstructuredConverter): the same
// values, the same presence, the same failures.
func TestCELViewMatchesConversion(t *testing.T) {
	objs := viewObjects()
	for _, o := range objs {
		want, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
		if err != nil {
			t.Fatal(err)
		}
		view, err := objectValue(o, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := view.(*structVal); !ok {
			t.Fatalf("%T is converted whole, not viewed", o)
		}
		got, err := native(view, nil)
		if err != nil {
			t.Fatalf("%T: %v", o, err)
		}
		if !reflect.DeepEqual(got, any(want)) {
			t.Errorf("%T: the view reads as\n%#v\nthe converter gives\n%#v", o, got, want)
		}
	}
	for _, expr := range viewExprs {
		ast, iss := celEnv.Compile(expr)
		if iss.Err() != nil {
			t.Fatalf("%s: %v", expr, iss.Err())
		}
		prg, err := celEnv.Program(ast)
		if err != nil {
			t.Fatal(err)
		}
		answered := 0
		for _, o := range append(objs, unstructuredOf(t, objs)...) {
			whole, view, wholeErr, viewErr := evalBoth(t, prg, o)
			if (wholeErr == nil) != (viewErr == nil) {
				t.Errorf("%s on %T: converted whole: %v (%v); viewed: %v (%v)", expr, o, whole, wholeErr, view, viewErr)
				continue
			}
			if wholeErr != nil {
				continue
			}
			answered++
			if w, v := normal(whole), normal(view); !reflect.DeepEqual(w, v) {
				t.Errorf("%s on %T: converted whole gives %v, viewed %v", expr, o, w, v)
			}
		}
		if answered == 0 && expr != "object.metadata.ownerReferences[5]" && expr != "object.spec[1]" &&
			expr != "object.metadata.labels[1]" && expr != "1 in object.metadata.labels" {
			t.Errorf("%s: no object answers it: the expression tests nothing", expr)
		}
	}
}

// unstructuredOf is objs converted, as unstructured objects: views read the converter's data
// too, and must read it as CEL reads that data itself.
func unstructuredOf(t *testing.T, objs []runtime.Object) []runtime.Object {
	var out []runtime.Object
	for _, o := range objs {
		data, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, &unstructured.Unstructured{Object: data})
	}
	return out
}

// TestCELViewIndexesAndFilters: custom CEL indexes and where filters read views and keep their
// answers.
func TestCELViewIndexesAndFilters(t *testing.T) {
	fn, err := Compile(Spec{Name: "ports", CEL: "object.spec.containers.filter(c, has(c.ports)).map(c, c.name)"})
	if err != nil {
		t.Fatal(err)
	}
	p := viewObjects()[0]
	got, err := fn(p)
	check(t, "ports", got, err, "app")
	f, err := CompileFilter("object.metadata.deletionTimestamp != null && object.spec.containers[0].resources.requests.cpu == '100m'")
	if err != nil {
		t.Fatal(err)
	}
	if b := f.Bind(); !b.Matches(p) || b.Matches(&corev1.Pod{}) {
		t.Errorf("filter on views: %v, %v", b.Matches(p), b.Matches(&corev1.Pod{}))
	}
}

// FuzzCELView fills typed objects at random from the fuzzer's bytes and checks that their
// views read as the converter converts them, whole and through the expressions above, and that
// the native programs of those and of filterExprs read them as cel-go does.
//
//	go test -run '^$' -fuzz FuzzCELView -fuzztime 60s ./pkg/index/
func FuzzCELView(f *testing.F) {
	f.Add([]byte("seed"), uint8(0))
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, uint8(3))
	f.Add([]byte("a longer seed for a fuller object, with more bytes to spend on its fields"), uint8(7))
	var prgs []cel.Program
	for _, expr := range viewExprs {
		ast, iss := celEnv.Compile(expr)
		if iss.Err() != nil {
			f.Fatal(iss.Err())
		}
		prg, err := celEnv.Program(ast)
		if err != nil {
			f.Fatal(err)
		}
		prgs = append(prgs, prg)
	}
	natives := nativeCases(f)
	f.Fuzz(func(t *testing.T, data []byte, kind uint8) {
		objs := []func() runtime.Object{
			func() runtime.Object { return &corev1.Pod{} },
			func() runtime.Object { return &appsv1.Deployment{} },
			func() runtime.Object { return &corev1.Service{} },
			func() runtime.Object { return &corev1.Secret{} },
			func() runtime.Object { return &corev1.Node{} },
			func() runtime.Object { return &batchv1.Job{} },
			func() runtime.Object { return &corev1.ConfigMap{} },
			func() runtime.Object { return &viewProbe{} },
		}
		obj := objs[int(kind)%len(objs)]()
		filler := randfill.NewFromGoFuzz(data).NilChance(0.3).NumElements(0, 3).MaxDepth(8).Funcs(
			func(q *resource.Quantity, c randfill.Continue) {
				*q = *resource.NewMilliQuantity(c.Int63n(1_000_000), resource.DecimalSI)
			},
			func(tm *metav1.Time, c randfill.Continue) { *tm = metav1.Unix(c.Int63n(2_000_000_000), 0) },
			func(raw *runtime.RawExtension, c randfill.Continue) {
				if c.Bool() {
					raw.Raw = []byte(fmt.Sprintf(`{"n":%d}`, c.Int63n(100)))
				}
			},
			func(fv *metav1.FieldsV1, c randfill.Continue) { fv.SetRawBytes([]byte(`{"f:metadata":{}}`)) },
			func(v *any, c randfill.Continue) {
				if c.Bool() {
					*v = map[string]any{"s": c.String(5)}
				}
			},
			func(u *uint32, c randfill.Continue) { *u = c.Uint32() },
		)
		filler.Fill(obj)
		want, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			t.Skipf("the converter refuses it: %v", err)
		}
		view, err := objectValue(obj, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := native(view, nil)
		if err != nil {
			t.Fatalf("%T: %v", obj, err)
		}
		if !reflect.DeepEqual(got, any(want)) {
			t.Fatalf("%T: the view reads as\n%#v\nthe converter gives\n%#v", obj, got, want)
		}
		for i, prg := range prgs {
			whole, viewed, wholeErr, viewErr := evalBoth(t, prg, obj)
			if (wholeErr == nil) != (viewErr == nil) {
				t.Fatalf("%s on %T: converted whole: %v (%v); viewed: %v (%v)", viewExprs[i], obj, whole, wholeErr, viewed, viewErr)
			}
			if wholeErr == nil && !reflect.DeepEqual(normal(whole), normal(viewed)) {
				t.Fatalf("%s on %T: converted whole gives %v, viewed %v", viewExprs[i], obj, normal(whole), normal(viewed))
			}
		}
		for _, c := range natives {
			want, wantErr, got, gotErr, ok := evalNative(t, c.prg, c.native, obj)
			if ok && ((wantErr == nil) != (gotErr == nil) || wantErr == nil && !reflect.DeepEqual(want, got)) {
				t.Fatalf("%s on %T: cel-go gives %v (%v), native %v (%v)", c.expr, obj, want, wantErr, got, gotErr)
			}
		}
	})
}
