package index

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

func benchPod() *corev1.Pod {
	c := func(n, image string) corev1.Container {
		return corev1.Container{Name: n, Image: image, Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("100m")}}}
	}
	ctl := true
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-7db6d8ff4d-abcde", Namespace: "shop",
			Labels:          map[string]string{"app": "web", "tier": "frontend", "team": "payments", "pod-template-hash": "7db6d8ff4d"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-7db6d8ff4d", UID: "6f1c0d2e-1111-4c43-9d2e-3a1f6d2b9c11", Controller: &ctl}}},
		Spec: corev1.PodSpec{NodeName: "node-17",
			InitContainers: []corev1.Container{c("init", "busybox:1.37")},
			Containers:     []corev1.Container{c("app", "registry.example/web:2.4.1"), c("proxy", "envoyproxy/envoy:v1.31.0")}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

// BenchmarkIndexFuncs measures each index function on one typical Pod: the cost every add and
// update of an indexed object pays.
//
//	go test -run '^$' -bench IndexFuncs -benchmem ./pkg/index/
func BenchmarkIndexFuncs(b *testing.B) {
	pod := benchPod()
	jp, err := Compile(Spec{Name: "jp-node", JSONPath: "{.spec.nodeName}"})
	if err != nil {
		b.Fatal(err)
	}
	jpImages, err := Compile(Spec{Name: "jp-images", JSONPath: "{.spec.containers[*].image}"})
	if err != nil {
		b.Fatal(err)
	}
	jpPhase, err := Compile(Spec{Name: "jp-phase", JSONPath: "{.status.phase}"})
	if err != nil {
		b.Fatal(err)
	}
	celTeam, err := Compile(Spec{Name: "cel-team", CEL: "object.metadata.labels['team']"})
	if err != nil {
		b.Fatal(err)
	}
	celImages, err := Compile(Spec{Name: "cel-images", CEL: "object.spec.containers.map(c, c.image)"})
	if err != nil {
		b.Fatal(err)
	}
	where, err := CompileFilter("object.spec.containers.exists(c, c.image.startsWith('registry.example/'))")
	if err != nil {
		b.Fatal(err)
	}
	whereRegex, err := CompileFilter("object.metadata.name.matches('^web-[a-z0-9]+-[a-z]+$')")
	if err != nil {
		b.Fatal(err)
	}
	if where.native == nil || whereRegex.native == nil {
		b.Fatal("the where filters are not planned natively")
	}
	// The same filters through cel-go's interpreter alone, side by side.
	whereCEL, whereRegexCEL := *where, *whereRegex
	whereCEL.native, whereRegexCEL.native = nil, nil
	for _, tc := range []struct {
		name string
		fn   cache.IndexFunc
		want int
	}{
		{"ByLabel", ByLabel, 8}, {"ByOwner", ByOwner, 1}, {"ByOwnerUID", ByOwnerUID, 1},
		{"ByNodeName", ByNodeName, 1}, {"ByImage", ByImage, 3},
		{"JSONPath-spec.nodeName", jp, 1}, {"JSONPath-images", jpImages, 2}, {"JSONPath-phase", jpPhase, 1},
		{"CEL-label", celTeam, 1}, {"CEL-images", celImages, 2},
		{"CEL-where", func(obj any) ([]string, error) { return where.BindWatch().Values(obj), nil }, 1},
		{"CEL-where-regex", func(obj any) ([]string, error) { return whereRegex.BindWatch().Values(obj), nil }, 1},
		{"CEL-where-interpreted", func(obj any) ([]string, error) { return whereCEL.BindWatch().Values(obj), nil }, 1},
		{"CEL-where-regex-interpreted", func(obj any) ([]string, error) { return whereRegexCEL.BindWatch().Values(obj), nil }, 1},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				v, err := tc.fn(pod)
				if err != nil || len(v) != tc.want {
					b.Fatalf("%v %v, want %d values", v, err, tc.want)
				}
			}
		})
	}
}
