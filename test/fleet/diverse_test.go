package fleet_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/diff"

	"github.com/multicache/multicache/test/fleet"
)

// TestBulkSeedDiverse checks that the diverse workload is served as generated (spec, status,
// metadata, ConfigMap data), with a managedFields entry per writer naming the Pod's own values,
// unique label maps, the four owner kinds, and status in what the API server serves.
func TestBulkSeedDiverse(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	f := fleet.StartT(t, fleet.Options{Clusters: 1, APIServerArgs: []string{"--watch-cache=false"}})
	l, err := fleet.NewLoader(f)
	if err != nil {
		t.Fatal(err)
	}
	spec := fleet.BulkSpec{Namespaces: 2, PodsPerNamespace: 80, ConfigMapsPerNamespace: 20, Nodes: 6, Workload: fleet.WorkloadDiverse}
	if _, err := l.BulkSeed(ctx, spec); err != nil {
		t.Fatal(err)
	}
	name := f.Names()[0]
	cs, _ := f.Clientset(name)
	pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 160 {
		t.Fatalf("%d pods, want 160", len(pods.Items))
	}
	want := map[string]*corev1.Pod{}
	for _, ns := range []string{"load-0", "load-1"} {
		for _, p := range fleet.DiversePods(name, ns, spec.PodsPerNamespace, spec.Nodes) {
			want[ns+"/"+p.Name] = p
		}
	}
	kinds, labelMaps := map[string]int{}, map[string]bool{}
	for i := range pods.Items {
		got := &pods.Items[i]
		w, ok := want[got.Namespace+"/"+got.Name]
		if !ok {
			t.Fatalf("pod %s/%s served but not generated", got.Namespace, got.Name)
		}
		if !apiequality.Semantic.DeepEqual(got.Spec, w.Spec) || !apiequality.Semantic.DeepEqual(got.Status, w.Status) {
			t.Fatalf("pod %s/%s served differently from generated: %s", got.Namespace, got.Name, diff.Diff(w, got))
		}
		if got.UID != w.UID || !got.CreationTimestamp.Equal(&w.CreationTimestamp) || !apiequality.Semantic.DeepEqual(got.OwnerReferences, w.OwnerReferences) ||
			!apiequality.Semantic.DeepEqual(got.Labels, w.Labels) || !apiequality.Semantic.DeepEqual(got.Annotations, w.Annotations) ||
			!apiequality.Semantic.DeepEqual(got.Finalizers, w.Finalizers) {
			t.Fatalf("pod %s/%s: metadata served differently from generated: %s", got.Namespace, got.Name, diff.Diff(w.ObjectMeta, got.ObjectMeta))
		}
		if got.Status.PodIP == "" || len(got.Status.ContainerStatuses) == 0 || got.Status.ContainerStatuses[0].ImageID == "" || got.Status.QOSClass == "" {
			t.Fatalf("pod %s/%s: no status: %+v", got.Namespace, got.Name, got.Status)
		}
		kinds[got.OwnerReferences[0].Kind]++
		labelMaps[labels.Set(got.Labels).String()] = true
		var managers []string
		for _, m := range got.ManagedFields {
			managers = append(managers, m.Manager+"/"+m.Subresource)
			if m.Subresource == "status" && !strings.Contains(m.FieldsV1.GetRawString(), `\"`+got.Status.PodIP+`\"`) {
				t.Errorf("pod %s/%s: kubelet's managedFields do not name its pod IP %s: %s", got.Namespace, got.Name, got.Status.PodIP, m.FieldsV1.GetRawString())
			}
			if m.Subresource == "" && !strings.Contains(m.FieldsV1.GetRawString(), string(got.OwnerReferences[0].UID)) {
				t.Errorf("pod %s/%s: controller's managedFields do not name its owner's UID", got.Namespace, got.Name)
			}
		}
		if strings.Join(managers, ",") != "kube-controller-manager/,kubelet/status" {
			t.Errorf("pod %s/%s: managedFields by %v", got.Namespace, got.Name, managers)
		}
	}
	for _, k := range []string{"ReplicaSet", "StatefulSet", "DaemonSet", "Job"} {
		if kinds[k] == 0 {
			t.Errorf("no pod owned by a %s: %v", k, kinds)
		}
	}
	if len(labelMaps) != len(pods.Items) {
		t.Errorf("%d distinct label maps among %d pods", len(labelMaps), len(pods.Items))
	}
	cms, err := cs.CoreV1().ConfigMaps("load-1").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/managed-by=Helm"})
	if err != nil {
		t.Fatal(err)
	}
	if len(cms.Items) != spec.ConfigMapsPerNamespace {
		t.Fatalf("%d configmaps in load-1, want %d", len(cms.Items), spec.ConfigMapsPerNamespace)
	}
	data := map[string]bool{}
	for k := range spec.ConfigMapsPerNamespace {
		w := fleet.DiverseConfigMap("load-1", k)
		got, err := cs.CoreV1().ConfigMaps("load-1").Get(ctx, w.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !apiequality.Semantic.DeepEqual(got.Data, w.Data) || len(got.ManagedFields) != 1 {
			t.Errorf("configmap %s: served data or managedFields differ: %s", w.Name, diff.Diff(w.Data, got.Data))
		}
		b, _ := json.Marshal(got.Data)
		data[string(b)] = true
	}
	if len(data) != spec.ConfigMapsPerNamespace {
		t.Errorf("%d distinct data among %d configmaps", len(data), spec.ConfigMapsPerNamespace)
	}
	size := 0
	for i := range pods.Items {
		b, _ := json.Marshal(&pods.Items[i])
		size += len(b)
	}
	t.Logf("diverse pod: %d B of JSON on average, as served; %d label maps, owners %v", size/len(pods.Items), len(labelMaps), kinds)
}
