package intern

import (
	"fmt"
	"reflect"
	"sync"
	"testing"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes/scheme"
)

func pod(name, cpu string, labels map[string]string) *corev1.Pod {
	secs := int64(300)
	c := func(n string) corev1.Container {
		return corev1.Container{
			Name: n, Image: "registry.example/app:1.2.3", ImagePullPolicy: corev1.PullIfNotPresent,
			TerminationMessagePath: "/dev/termination-log", SecurityContext: &corev1.SecurityContext{},
			Env: []corev1.EnvVar{{Name: "REPLICA", Value: name}},
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("128Mi"),
			}},
		}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: labels, UID: "uid-" + "name"},
		Spec: corev1.PodSpec{
			NodeName:        "node-1",
			SecurityContext: &corev1.PodSecurityContext{},
			Tolerations: []corev1.Toleration{{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists,
				Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &secs}},
			Containers: []corev1.Container{c("a"), c("b"), c("c")},
		},
	}
}

// decode round-trips p through protobuf, as an informer receives it: every part freshly
// allocated, slices grown by append.
func decode(t testing.TB, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	s := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme)
	data, err := runtime.Encode(s, p)
	if err != nil {
		t.Fatal(err)
	}
	out := &corev1.Pod{}
	if _, _, err := s.Decode(data, nil, out); err != nil {
		t.Fatal(err)
	}
	return out
}

func samePtr(a, b any) bool { return reflect.ValueOf(a).Pointer() == reflect.ValueOf(b).Pointer() }

func TestObjectSharesEqualPartsAndKeepsContent(t *testing.T) {
	tab := New(Options{})
	lbl := map[string]string{"app": "web", "tier": "frontend"}
	p1, p2 := decode(t, pod("p1", "100m", lbl)), decode(t, pod("p2", "100m", lbl))
	p3 := decode(t, pod("p3", "250m", map[string]string{"app": "web"}))
	want := []*corev1.Pod{p1.DeepCopy(), p2.DeepCopy(), p3.DeepCopy()}
	for i, p := range []*corev1.Pod{p1, p2, p3} {
		tab.Object(p)
		if !apiequality.Semantic.DeepEqual(p, want[i]) {
			t.Fatalf("pod %d changed content:\n got %+v\nwant %+v", i, p, want[i])
		}
	}
	if !samePtr(p1.Labels, p2.Labels) || samePtr(p1.Labels, p3.Labels) {
		t.Errorf("labels: equal maps must be shared, different ones not")
	}
	r1, r2, r3 := p1.Spec.Containers[0].Resources.Requests, p2.Spec.Containers[2].Resources.Requests, p3.Spec.Containers[0].Resources.Requests
	if !samePtr(r1, r2) || samePtr(r1, r3) {
		t.Errorf("resource lists: equal ones must be shared, different ones not")
	}
	if &p1.Spec.Tolerations[0] != &p3.Spec.Tolerations[0] {
		t.Errorf("equal toleration lists are not shared")
	}
	if p1.Spec.SecurityContext != p2.Spec.SecurityContext || p1.Spec.Containers[0].SecurityContext != p3.Spec.Containers[1].SecurityContext {
		t.Errorf("empty security contexts are not shared")
	}
	if cap(p1.Spec.Containers) != len(p1.Spec.Containers) {
		t.Errorf("containers keep spare capacity: len %d cap %d", len(p1.Spec.Containers), cap(p1.Spec.Containers))
	}
	if !samePtr(p1.Spec.Containers, p1.Spec.Containers) || &p1.Spec.Containers[0] == &p2.Spec.Containers[0] {
		t.Errorf("container lists differ per pod (env) and must not be shared")
	}
}

func TestNonEmptySecurityContextIsKept(t *testing.T) {
	tab := New(Options{})
	root := false
	p := pod("p", "1", nil)
	p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: &root}
	p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
	p = decode(t, p)
	want := p.DeepCopy()
	tab.Object(p)
	if !apiequality.Semantic.DeepEqual(p, want) || p.Spec.SecurityContext == emptyPodSecurity || p.Spec.Containers[0].SecurityContext == emptySecurity {
		t.Fatalf("a set security context was replaced: %+v", p.Spec)
	}
}

func TestStringMapKeysAreUnambiguous(t *testing.T) {
	tab := New(Options{})
	a := tab.StringMap(map[string]string{"a": "bc"})
	b := tab.StringMap(map[string]string{"ab": "c"})
	c := tab.StringMap(map[string]string{"a": "b", "c": ""})
	if b["ab"] != "c" || c["a"] != "b" || a["a"] != "bc" || len(c) != 2 {
		t.Fatalf("maps collided: %v %v %v", a, b, c)
	}
}

func TestLargeMapsAreNotShared(t *testing.T) {
	tab := New(Options{MaxValueBytes: 16})
	big := func() map[string]string { return map[string]string{"note": "0123456789abcdefghij"} }
	x, y := tab.StringMap(big()), tab.StringMap(big())
	if samePtr(x, y) || tab.strMaps.Len() != 0 {
		t.Fatalf("a map over MaxValueBytes was shared")
	}
}

func TestTableIsBounded(t *testing.T) {
	tab := New(Options{MaxEntries: 4})
	for i := range 100 {
		tab.StringMap(map[string]string{"i": fmt.Sprint(i)})
	}
	if n := tab.strMaps.Len(); n != 4 {
		t.Fatalf("table holds %d entries, want 4", n)
	}
}

func TestConcurrentUse(t *testing.T) {
	tab := New(Options{MaxEntries: 8})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				p := pod(fmt.Sprint(g, i), fmt.Sprint(i%5+1), map[string]string{"app": fmt.Sprint(i % 11)})
				tab.Object(p)
				if p.Labels["app"] != fmt.Sprint(i%11) {
					t.Errorf("got labels %v", p.Labels)
					return
				}
			}
		})
	}
	wg.Wait()
}

// BenchmarkObjectPod times Object alone on freshly decoded Pods, decoded in batches off the
// clock so that the live heap (and the collector's work over it) stays small.
func BenchmarkObjectPod(b *testing.B) {
	tab := New(Options{})
	src := pod("p", "100m", map[string]string{"app": "web", "tier": "frontend", "team": "a"})
	src.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "busybox:1.37", Command: []string{"sh", "-c", "true"}}}
	b.ReportAllocs()
	const batch = 1000
	pods := make([]*corev1.Pod, batch)
	for i := 0; i < b.N; i += batch {
		b.StopTimer()
		for j := range pods {
			pods[j] = decode(b, src)
		}
		b.StartTimer()
		for j := range min(batch, b.N-i) {
			tab.Object(pods[j])
		}
	}
}

// TestSharedMapIsNeverRewritten: a canonical map evicted from the table and passed in again
// (an object transformed a second time) is left as it is, while other objects read it.
func TestSharedMapIsNeverRewritten(t *testing.T) {
	tab := New(Options{MaxEntries: 1})
	shared := tab.StringMap(map[string]string{"app": "a", "tier": "web"})
	tab.StringMap(map[string]string{"other": "x"}) // evicts shared's entry
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 1000 {
			_ = shared["app"] // another object reading its labels
		}
	}()
	again := tab.StringMap(shared)
	<-done
	if samePtr(again, shared) && tab.strMaps.Len() == 1 {
		// It may become canonical again, as long as nothing wrote to it: the race detector
		// would have caught a write.
		return
	}
	if shared["app"] != "a" || shared["tier"] != "web" || len(shared) != 2 || again["app"] != "a" {
		t.Fatalf("shared %v, again %v", shared, again)
	}
}

// TestEventSharesItsStrings: two Events of the same kind of happening share what they are
// about, why and who reported it, and a short message; content stays equal.
func TestEventSharesItsStrings(t *testing.T) {
	ev := func(name, msg string) *corev1.Event {
		e := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "load-1"},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "load-1", Name: name, APIVersion: "v1", FieldPath: "spec.containers{app}"},
			Reason:         "Pulling", Message: msg, Type: "Normal", Source: corev1.EventSource{Component: "kubelet", Host: "node-1"},
			ReportingController: "kubelet", ReportingInstance: "node-1"}
		// As decoded: every string its own copy.
		b, err := runtime.Encode(protobuf.NewSerializer(scheme.Scheme, scheme.Scheme), e)
		if err != nil {
			t.Fatal(err)
		}
		out := &corev1.Event{}
		if _, _, err := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Decode(b, nil, out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	long := string(make([]byte, 200))
	e1, e2 := ev("a", `Pulling image "nginx"`), ev("b", `Pulling image "nginx"`)
	e3, e4 := ev("c", long), ev("d", long)
	want := []*corev1.Event{e1.DeepCopy(), e2.DeepCopy(), e3.DeepCopy(), e4.DeepCopy()}
	tab := New(Options{})
	for i, e := range []*corev1.Event{e1, e2, e3, e4} {
		tab.Object(e)
		if !apiequality.Semantic.DeepEqual(e, want[i]) {
			t.Fatalf("event %d changed content", i)
		}
	}
	same := func(a, b string) bool { return len(a) > 0 && unsafeData(a) == unsafeData(b) }
	for what, pair := range map[string][2]string{
		"reason":    {e1.Reason, e2.Reason},
		"kind":      {e1.InvolvedObject.Kind, e2.InvolvedObject.Kind},
		"fieldPath": {e1.InvolvedObject.FieldPath, e2.InvolvedObject.FieldPath},
		"component": {e1.Source.Component, e2.Source.Component},
		"host":      {e1.Source.Host, e2.Source.Host},
		"message":   {e1.Message, e2.Message},
	} {
		if !same(pair[0], pair[1]) {
			t.Errorf("%s is not shared", what)
		}
	}
	if same(e3.Message, e4.Message) {
		t.Error("a long message is shared: most are an event's own")
	}
}

// unsafeData is where a string's bytes are: equal for a shared string.
func unsafeData(s string) *byte { return unsafe.StringData(s) }

// TestResourcesKeyIsTheCanonicalQuantity: lists are equal when their quantities are, written
// as Quantity.String gives them ("0.1" is read as "100m"), and different amounts, names or
// spellings kept as written ("+1") never share.
func TestResourcesKeyIsTheCanonicalQuantity(t *testing.T) {
	tab := New(Options{})
	list := func(cpu, mem string) corev1.ResourceList {
		return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}
	}
	a := tab.Resources(list("100m", "128Mi"))
	if b := tab.Resources(list("0.1", "128Mi")); !samePtr(a, b) {
		t.Errorf("0.1 and 100m CPU: equal lists not shared")
	}
	plus := tab.Resources(corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("+1")})
	if samePtr(plus, tab.Resources(corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")})) {
		t.Errorf(`"+1" taken for "1": a list would be served as the other was written`)
	}
	for _, other := range []corev1.ResourceList{list("200m", "128Mi"), list("100m", "129Mi"), {corev1.ResourceCPU: resource.MustParse("100m"), "memory2": resource.MustParse("128Mi")}} {
		if samePtr(a, tab.Resources(other)) {
			t.Errorf("%v shared with %v", other, a)
		}
	}
}
