package index

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// richPod has a value of most kinds a path can reach: strings, numbers, bools, pointers,
// maps, slices of structs, Times and Quantities, nil pointers and empty slices.
func richPod() *corev1.Pod {
	p := filterPod("q", "nginx:1")
	p.Labels = map[string]string{"app": "web", "app.kubernetes.io/name": "x", "empty": ""}
	p.CreationTimestamp = metav1.Date(2026, 11, 27, 4, 5, 6, 0, time.UTC)
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "u", Controller: ptrTo(true)}}
	p.Spec.NodeName = "node-1"
	p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "side", Image: "busybox",
		Ports:     []corev1.ContainerPort{{ContainerPort: 80}, {ContainerPort: 443}},
		Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")}}})
	p.Spec.Priority = ptrTo(int32(7))
	p.Status.Phase = corev1.PodRunning
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "a", RestartCount: 3, Ready: true}, {Name: "side", RestartCount: 0}}
	return p
}

var plainPaths = []string{
	".metadata.name", "{.metadata.name}", "$.metadata.name", "{$.metadata.namespace}", ".metadata.labels.app",
	".metadata.labels.missing", ".metadata.labels.empty", ".metadata.labels", ".metadata.creationTimestamp",
	".metadata.ownerReferences[0].controller", ".metadata.ownerReferences[*].kind", ".metadata.ownerReferences[3].kind",
	".spec.nodeName", ".spec.priority", ".spec.containers[*].image", ".spec.containers[1].image", ".spec.containers[*].ports[*].containerPort",
	".spec.containers[*].resources.limits.cpu", ".spec.containers", ".spec", ".spec.nosuch", ".spec.containers.image",
	".status.phase", ".status.containerStatuses[*].restartCount", ".status.containerStatuses[*].ready", ".status.startTime",
	".spec.securityContext.runAsUser", ".kind", ".apiVersion", ".metadata.labels.app.x", ".spec.nodeName[0]", ".spec.containers[*]",
}

// TestPlainPathsMatchJSONPath: every plain path gives, of a typed Pod and of the same Pod
// unstructured, exactly the values client-go's JSONPath gives of the unstructured Pod: what the
// object's JSON holds. (Of the typed Pod, client-go's JSONPath gives nothing at all for
// spec.containers[*].ports[*].containerPort when a container has no ports; the walk gives the
// other containers' ports, as of the JSON.)
func TestPlainPathsMatchJSONPath(t *testing.T) {
	p := richPod()
	p.Kind, p.APIVersion = "Pod", "v1"
	u := unstr(t, p)
	empty := &corev1.Pod{}
	objs := map[string]any{"typed": p, "unstructured": u, "empty typed": empty}
	jsonOf := map[string]any{"typed": u, "unstructured": u, "empty typed": unstr(t, empty)}
	for _, path := range plainPaths {
		tmpl := strings.TrimSpace(path)
		if !strings.HasPrefix(tmpl, "{") {
			tmpl = "{" + tmpl + "}"
		}
		steps, ok := parsePlainPath(tmpl)
		if !ok {
			t.Errorf("%s: not read as a plain path", path)
			continue
		}
		slow, err := jsonPathFunc(tmpl)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		for kind, obj := range objs {
			want, _ := slow(jsonOf[kind])
			got, ok := plainValues(steps, obj, nil)
			if !ok {
				got, _ = slow(obj) // the walk gave up: what compileJSONPath answers
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s of the %s Pod: %q (walked to the end: %v), JSONPath gives %q", path, kind, got, ok, want)
			}
		}
	}
	for _, notPlain := range []string{"{..image}", "{.spec.containers[?(@.name=='a')].image}", "{.spec.containers[0:1].image}", "{range .items[*]}{.x}{end}", "{.metadata.labels['app']}", "{.a.b}{.c}", "{.spec.containers[-1].image}", "{}"} {
		if _, ok := parsePlainPath(notPlain); ok {
			t.Errorf("%s: read as a plain path", notPlain)
		}
	}
}

// FuzzPlainPath: for any path, what compileJSONPath gives of an unstructured Pod equals what
// client-go's JSONPath gives; of the typed Pod, a plain walk that reaches its end gives the
// same; nothing panics.
func FuzzPlainPath(f *testing.F) {
	for _, p := range plainPaths {
		f.Add(p)
	}
	p := richPod()
	u := unstr(f, p)
	f.Fuzz(func(t *testing.T, path string) {
		tmpl := strings.TrimSpace(path)
		if !strings.HasPrefix(tmpl, "{") {
			tmpl = "{" + tmpl + "}"
		}
		slow, err := jsonPathFunc(tmpl)
		if err != nil {
			return
		}
		fast, err := compileJSONPath(path)
		if err != nil {
			t.Fatalf("%q: JSONPath parses, compileJSONPath fails: %v", path, err)
		}
		// (A recursive path walks maps, in no order: compare the values, not their order.)
		want, _ := slow(u)
		slices.Sort(want)
		got, _ := fast(u)
		if slices.Sort(got); !slices.Equal(got, want) {
			t.Fatalf("%q of the unstructured Pod: %q, JSONPath gives %q", path, got, want)
		}
		if steps, ok := parsePlainPath(tmpl); ok {
			if got, ok := plainValues(steps, p, nil); ok && !slices.Equal(sorted(got), want) {
				t.Fatalf("%q of the typed Pod: %q, JSONPath gives %q of its JSON", path, got, want)
			}
		}
	})
}

func ptrTo[T any](v T) *T { return &v }

func sorted(s []string) []string { slices.Sort(s); return s }
