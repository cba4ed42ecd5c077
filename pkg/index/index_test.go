package index

import (
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

func pod() *corev1.Pod {
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Labels: map[string]string{"app": "web", "tier": "fe"},
			OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "rs-1", UID: "u-1"}}},
		Spec: corev1.PodSpec{
			NodeName:            "node-3",
			InitContainers:      []corev1.Container{{Name: "i", Image: "busybox:1"}},
			Containers:          []corev1.Container{{Name: "a", Image: "nginx:1"}, {Name: "b", Image: "busybox:1"}},
			EphemeralContainers: []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "dbg", Image: "debug:1"}}},
		},
	}
}

func unstr(t testing.TB, o runtime.Object) *unstructured.Unstructured {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: m}
}

func check(t *testing.T, what string, got []string, err error, want ...string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	sort.Strings(got)
	sort.Strings(want)
	if len(got) != len(want) {
		t.Fatalf("%s = %v, want %v", what, got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s = %v, want %v", what, got, want)
		}
	}
}

func TestBuiltinsTypedAndUnstructured(t *testing.T) {
	for name, obj := range map[string]any{"typed": pod(), "unstructured": unstr(t, pod())} {
		got, err := ByLabel(obj)
		check(t, name+" label", got, err, "app", "app=web", "tier", "tier=fe")
		got, err = ByOwnerUID(obj)
		check(t, name+" owner uid", got, err, "u-1")
		got, err = ByOwner(obj)
		check(t, name+" owner", got, err, "ReplicaSet/rs-1")
		got, err = ByNodeName(obj)
		check(t, name+" node", got, err, "node-3")
		got, err = ByImage(obj)
		check(t, name+" image", got, err, "busybox:1", "nginx:1", "debug:1")
	}
	meta := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: map[string]string{"a": "b"}}}
	got, err := ByLabel(meta)
	check(t, "metadata label", got, err, "a", "a=b")
	got, err = ByImage(meta)
	check(t, "metadata image", got, err)
	got, err = ByNodeName(&corev1.ConfigMap{})
	check(t, "configmap node", got, err)
}

func TestCustom(t *testing.T) {
	for _, tc := range []struct {
		spec Spec
		want []string
	}{
		{Spec{Name: "n1", JSONPath: "{.spec.nodeName}"}, []string{"node-3"}},
		{Spec{Name: "n2", JSONPath: ".spec.containers[*].name"}, []string{"a", "b"}},
		{Spec{Name: "n3", JSONPath: "{.metadata.labels.app}"}, []string{"web"}},
		{Spec{Name: "n4", JSONPath: "{.spec.missing}"}, nil},
		{Spec{Name: "c1", CEL: "object.spec.nodeName"}, []string{"node-3"}},
		{Spec{Name: "c2", CEL: "object.spec.containers.map(c, c.image)"}, []string{"nginx:1", "busybox:1"}},
		{Spec{Name: "c3", CEL: "object.metadata.labels['app'] + '/' + object.metadata.labels['tier']"}, []string{"web/fe"}},
		{Spec{Name: "c4", CEL: "size(object.spec.containers) > 1"}, []string{"true"}},
		{Spec{Name: "c5", CEL: "object.spec.nope"}, nil},
	} {
		f, err := Compile(tc.spec)
		if err != nil {
			t.Fatalf("%s: %v", tc.spec.Name, err)
		}
		for kind, obj := range map[string]any{"typed": pod(), "unstructured": unstr(t, pod())} {
			got, err := f(obj)
			check(t, tc.spec.Name+" "+kind, got, err, tc.want...)
		}
	}
}

func TestCompileErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct {
		spec Spec
		want string
	}{
		{Spec{JSONPath: ".a"}, "name is required"},
		{Spec{Name: "label", CEL: "1"}, "built-in"},
		{Spec{Name: "x"}, "one of jsonPath or cel"},
		{Spec{Name: "x", JSONPath: ".a", CEL: "1"}, "not both"},
		{Spec{Name: "x", JSONPath: "{.a[}"}, "jsonPath"},
		{Spec{Name: "x", CEL: "object.("}, "cel"},
	} {
		_, err := Compile(tc.spec)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want it to mention %q", tc.spec, err, tc.want)
		}
	}
}
