package clusterset

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	"github.com/multicache/multicache/internal/fakeapi"
	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/index"
)

func TestParseResourceName(t *testing.T) {
	for in, want := range map[string]schema.GroupVersionResource{
		"pods":                {Resource: "pods"},
		"Pod":                 {Resource: "pod"},
		"po":                  {Resource: "po"},
		"deployments.apps":    {Group: "apps", Resource: "deployments"},
		"apps/v1/deployments": {Group: "apps", Version: "v1", Resource: "deployments"},
		"v1/pods":             {Version: "v1", Resource: "pods"},
	} {
		got, err := parseResourceName(in)
		if err != nil || got != want {
			t.Errorf("%q = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"a//b", "a/b/c/d", "po ds", "/pods"} {
		if _, err := parseResourceName(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestOptionsErrorsNameTheField(t *testing.T) {
	src := Static{}
	for _, tc := range []struct {
		opts Options
		want string
	}{
		{Options{Resources: []ResourceSpec{{Name: "pods"}}}, "Source is required"},
		{Options{Source: src}, "at least one resource"},
		{Options{Source: src, Resources: []ResourceSpec{{Name: ""}}}, "resources[0].name"},
		{Options{Source: src, Resources: []ResourceSpec{{Name: "pods"}, {Name: "pods"}}}, "resources[1].name"},
		{Options{Source: src, Resources: []ResourceSpec{{Name: "pods", LabelSelector: "a in (b"}}}, "resources[0].labelSelector"},
		{Options{Source: src, Resources: []ResourceSpec{{Name: "pods", FieldSelector: "a"}}}, "resources[0].fieldSelector"},
		{Options{Source: src, Resources: []ResourceSpec{{Name: "pods", Mode: "fast"}}}, "resources[0].mode"},
		{Options{Source: src, Resources: []ResourceSpec{{Name: "pods", Indexes: []aggregate.IndexSpec{{Name: "x"}}}}}, "resources[0].indexes[0]"},
		{Options{Source: src, Resources: []ResourceSpec{{Name: "pods"}}, Burst: -1}, "burst"},
		{Options{Source: src, Resources: []ResourceSpec{{Name: "pods", Counts: []string{"owner"}}}}, "resources[0].counts[0]"},
		{Options{Source: src, Resources: []ResourceSpec{{Name: "pods", Counts: []string{"index:image"}}}}, `resources[0].counts[0]: key "index:image": index "image" is not among`},
	} {
		_, err := New(tc.opts)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want it to name %q", err, tc.want)
		}
	}
	// A resource's counts are kept by its aggregate, beside namespace.
	reg, err := New(Options{Source: src, Resources: []ResourceSpec{{Name: "pods", Indexes: []aggregate.IndexSpec{{Name: "image", Func: index.ByImage}},
		Counts: []string{"label:tier", "index:image"}}}})
	if err != nil {
		t.Fatal(err)
	}
	agg, _ := reg.Aggregate("pods")
	var kept []string
	for _, li := range agg.LearnedIndexes() {
		if li.Kept {
			kept = append(kept, li.Key)
		}
	}
	if !slices.Equal(kept, []string{"index:image", "label:tier", "namespace"}) {
		t.Errorf("kept counts %v, want index:image, label:tier and namespace", kept)
	}
	// A negative QPS turns the client-side limit off, as in rest.Config (the benchmarks do).
	if _, err := New(Options{Source: src, Resources: []ResourceSpec{{Name: "pods"}}, QPS: -1}); err != nil {
		t.Errorf("QPS -1: %v", err)
	}
}

func TestDescribe(t *testing.T) {
	gr := schema.GroupResource{Resource: "pods"}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{apierrors.NewUnauthorized("x"), "unauthorized (401)"},
		{apierrors.NewForbidden(gr, "", errors.New("no")), "forbidden (403)"},
		{apierrors.NewNotFound(gr, ""), "not served (404)"},
		{&url.Error{Op: "Get", URL: "https://127.0.0.1:1/api?token=secret", Err: errors.New("dial tcp 127.0.0.1:1: connect: connection refused")}, "unreachable: https://127.0.0.1:1: connection refused"},
		{fmt.Errorf("wrapped: %w", apierrors.NewInternalError(errors.New("boom"))), "server error (500)"},
		{&url.Error{Op: "Get", URL: "https://127.0.0.1:1/api", Err: errors.New("getting credentials: exec: executable /bin/p failed with exit code 1")},
			"credentials: exec: executable /bin/p failed with exit code 1"},
	} {
		got := describe(tc.err)
		if !strings.HasPrefix(got, tc.want) || strings.Contains(got, "secret") {
			t.Errorf("describe(%v) = %q, want prefix %q", tc.err, got, tc.want)
		}
	}
}

func TestTransform(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name:          "p",
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
		Annotations:   map[string]string{LastAppliedAnnotation: "{}", "keep": "me"},
	}}
	tf := newTransform(TransformOptions{})
	out, _ := tf(pod)
	out, _ = tf(out) // idempotent
	p := out.(*corev1.Pod)
	if p.ManagedFields != nil || p.Annotations[LastAppliedAnnotation] != "" || p.Annotations["keep"] != "me" {
		t.Errorf("default transform: %+v", p.ObjectMeta)
	}
	pod2 := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{ManagedFields: []metav1.ManagedFieldsEntry{{}}, Annotations: map[string]string{LastAppliedAnnotation: "{}"}}}
	out, _ = newTransform(TransformOptions{KeepManagedFields: true, KeepLastApplied: true})(pod2)
	if p := out.(*corev1.Pod); len(p.ManagedFields) != 1 || p.Annotations[LastAppliedAnnotation] != "{}" {
		t.Errorf("keep-all transform: %+v", p.ObjectMeta)
	}
}

// TestUserTransformCannotCorruptSharedParts: a user transform that mutates objects in place
// runs before sharing, so it changes only the object it was given, never the label maps,
// tolerations or security contexts other cached objects share.
func TestUserTransformCannotCorruptSharedParts(t *testing.T) {
	mkPod := func(name string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{"app": "web", "tier": "front"}},
			Spec: corev1.PodSpec{
				SecurityContext: &corev1.PodSecurityContext{},
				Tolerations:     []corev1.Toleration{{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists}},
				Containers:      []corev1.Container{{Name: "c", Image: "nginx"}},
			},
		}
	}
	tf := newTransform(TransformOptions{Func: func(obj any) (any, error) {
		p := obj.(*corev1.Pod)
		if p.Name == "marked" {
			p.Labels["marked"] = "true"
			p.Spec.SecurityContext.RunAsNonRoot = ptr.To(true)
			p.Spec.Tolerations[0].Key = "marked"
		}
		return p, nil
	}})
	var others []*corev1.Pod
	for i := range 3 {
		out, err := tf(mkPod(fmt.Sprintf("other-%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		others = append(others, out.(*corev1.Pod))
	}
	out, _ := tf(mkPod("marked"))
	if m := out.(*corev1.Pod); m.Labels["marked"] != "true" || m.Spec.SecurityContext.RunAsNonRoot == nil {
		t.Fatalf("the transform's own change is missing: %+v", m.ObjectMeta)
	}
	later, _ := tf(mkPod("other-later"))
	for _, p := range append(others, later.(*corev1.Pod)) {
		if p.Labels["marked"] != "" || p.Spec.SecurityContext.RunAsNonRoot != nil || p.Spec.Tolerations[0].Key != "node.kubernetes.io/not-ready" {
			t.Errorf("pod %s was changed by a transform of another pod: labels %v, securityContext %+v, tolerations %+v",
				p.Name, p.Labels, p.Spec.SecurityContext, p.Spec.Tolerations)
		}
	}
}

// flipSource is a Source whose clusters a test changes at will.
type flipSource struct {
	mu      sync.Mutex
	configs []ClusterConfig
	changes chan struct{}
}

func (s *flipSource) Load() ([]ClusterConfig, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]ClusterConfig(nil), s.configs...), nil
}

func (s *flipSource) Changes(context.Context) <-chan struct{} { return s.changes }

func (s *flipSource) set(cfgs ...ClusterConfig) {
	s.mu.Lock()
	s.configs = cfgs
	s.mu.Unlock()
	s.changes <- struct{}{}
}

// TestRapidSourceChanges: clusters that join, leave, re-join and rotate faster than their
// runners start and stop end exactly as the source last said, with one member per cluster in
// the aggregate and no runner left behind.
func TestRapidSourceChanges(t *testing.T) {
	a, b := fakeapi.New(t), fakeapi.New(t)
	src := &flipSource{changes: make(chan struct{})}
	reg, err := New(Options{Source: src, Resources: []ResourceSpec{{Name: "pods"}}, ProbeInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = reg.Start(ctx); close(done) }()
	c1 := func(fp string) ClusterConfig { return ClusterConfig{Name: "c1", Config: a.Config(), Fingerprint: fp} }
	c2 := ClusterConfig{Name: "c2", Config: b.Config(), Fingerprint: "1"}
	for i := range 30 {
		switch i % 3 {
		case 0:
			src.set(c1("1"), c2)
		case 1:
			src.set(c2)
		case 2:
			src.set(c1(strconv.Itoa(i)), c2) // back, with other credentials
		}
	}
	src.set(c1("final"))
	pods, _ := reg.Aggregate("pods")
	deadline := time.Now().Add(20 * time.Second)
	for fmt.Sprint(reg.Clusters()) != "[c1]" || fmt.Sprint(pods.Clusters()) != "[c1]" || !pods.HasSynced("c1") {
		if time.Now().After(deadline) {
			t.Fatalf("registry %v, aggregate %v (synced %v): not what the source last said, [c1]", reg.Clusters(), pods.Clusters(), pods.HasSynced("c1"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	src.set()
	deadline = time.Now().Add(20 * time.Second)
	for len(reg.Clusters())+len(pods.Clusters()) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("after every cluster left: registry %v, aggregate %v", reg.Clusters(), pods.Clusters())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	<-done
	// Idle HTTP connections keep goroutines of net/http; none of ours, nor of client-go's
	// informer machinery, may be left.
	var left string
	deadline = time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		buf := make([]byte, 1<<20)
		stacks := string(buf[:runtime.Stack(buf, true)])
		left = ""
		for _, g := range strings.Split(stacks, "\n\n") {
			if strings.Contains(g, "multicache/pkg/") || strings.Contains(g, "client-go/tools/cache") {
				if !strings.Contains(g, "TestRapidSourceChanges") {
					left += g + "\n\n"
				}
			}
		}
		if left == "" {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if left != "" {
		t.Errorf("goroutines left after Start returned:\n%s", left)
	}
}

// handoffSource is a flipSource that is a HandoffSource: the clusters in fleet stay in the
// fleet when Load leaves them out.
type handoffSource struct {
	flipSource
	fleet map[string]bool
}

func (s *handoffSource) Retains(cluster string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fleet[cluster]
}

// moveRecorder records what an aggregate handler that takes handoffs hears.
type moveRecorder struct {
	mu                      sync.Mutex
	adds, deletes, handoffs map[string]int
}

func (r *moveRecorder) count(m map[string]int, c string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m[c]++
}
func (r *moveRecorder) OnAdd(c string, _ any, _ bool) { r.count(r.adds, c) }
func (r *moveRecorder) OnUpdate(string, any, any)     {}
func (r *moveRecorder) OnDelete(c string, _ any)      { r.count(r.deletes, c) }
func (r *moveRecorder) OnHandoff(c string)            { r.count(r.handoffs, c) }
func (r *moveRecorder) get(m map[string]int, c string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return m[c]
}

// TestHandoffIsNotRemoval: a cluster a HandoffSource leaves out but retains (it moved to
// another replica) leaves the aggregate as one handoff and no delete; a cluster it no longer
// retains (removed from the fleet) leaves as deletes.
func TestHandoffIsNotRemoval(t *testing.T) {
	a, b := fakeapi.New(t), fakeapi.New(t)
	a.SetPods([]corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p1"}}, {ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p2"}}})
	b.SetPods([]corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p3"}}})
	src := &handoffSource{flipSource: flipSource{changes: make(chan struct{}, 1)}, fleet: map[string]bool{"a": true, "b": true}}
	ca := ClusterConfig{Name: "a", Config: a.Config(), Fingerprint: "1"}
	cb := ClusterConfig{Name: "b", Config: b.Config(), Fingerprint: "1"}
	src.configs = []ClusterConfig{ca, cb}
	reg, err := New(Options{Source: src, Resources: []ResourceSpec{{Name: "pods"}}, ProbeInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	pods, _ := reg.Aggregate("pods")
	rec := &moveRecorder{adds: map[string]int{}, deletes: map[string]int{}, handoffs: map[string]int{}}
	h, err := pods.AddEventHandlerWithOptions(rec, aggregate.HandlerOptions{EveryEvent: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Remove)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = reg.Start(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: adds %v, deletes %v, handoffs %v", what, rec.adds, rec.deletes, rec.handoffs)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitFor("both clusters added", func() bool { return rec.get(rec.adds, "a") == 2 && rec.get(rec.adds, "b") == 1 })

	src.set(cb) // a moved to another replica: still in the fleet
	waitFor("a handed off", func() bool { return rec.get(rec.handoffs, "a") == 1 && len(pods.Clusters()) == 1 })

	src.mu.Lock()
	src.fleet = map[string]bool{"a": true}
	src.mu.Unlock()
	src.set() // b left the fleet
	waitFor("b removed", func() bool { return rec.get(rec.deletes, "b") == 1 && len(pods.Clusters()) == 0 })
	if n := rec.get(rec.deletes, "a"); n != 0 {
		t.Errorf("a's handoff was told as %d deletes", n)
	}
	if n := rec.get(rec.handoffs, "b"); n != 0 {
		t.Errorf("b's removal was told as a handoff")
	}
}
