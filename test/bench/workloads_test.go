package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/test/fleet"
	"github.com/multicache/multicache/test/harness"
)

// workloadHeap is what BenchmarkHeapWorkloads measured on one workload.
type workloadHeap struct {
	workload      fleet.Workload
	clusters      int
	objects       int                  // in all clusters
	podJSON       int                  // mean bytes of a served Pod, as JSON
	cmJSON        int                  // mean bytes of a served ConfigMap, as JSON
	perObject     map[string][]float64 // variant → heap per object, one per run
	variantsOrder []string
}

const variantB = "B: informer factory per cluster"

func heapVariants() []variant {
	return []variant{
		{variantB, baseline},
		{"multicache default (typed, protobuf, managedFields dropped)", multicache(clusterset.TransformOptions{}, "")},
		{"multicache, no transform", multicache(clusterset.TransformOptions{KeepManagedFields: true, KeepLastApplied: true, KeepDuplicates: true}, "")},
		{"multicache metadata-only", multicache(clusterset.TransformOptions{}, clusterset.ModeMetadata)},
	}
}

// BenchmarkHeapWorkloads measures P1 (heap per cached object) on two workloads, each in a fleet
// of its own: the ReplicaSet-like one BulkSeed writes by default and the diverse one
// (fleet.WorkloadDiverse). Each variant runs MULTICACHE_BENCH_WORKLOAD_RUNS times in rotating
// order; the table has medians and ranges. MULTICACHE_BENCH_WORKLOAD_OBJECTS objects per
// cluster (half Pods, half ConfigMaps) in MULTICACHE_BENCH_WORKLOAD_CLUSTERS clusters.
//
//	go test -run '^$' -bench HeapWorkloads -benchtime 1x -timeout 60m -v ./test/bench/
func BenchmarkHeapWorkloads(b *testing.B) {
	var got []*workloadHeap
	for _, w := range []fleet.Workload{fleet.WorkloadReplicaSetLike, fleet.WorkloadDiverse} {
		b.Run(w.String(), func(b *testing.B) { got = append(got, measureWorkloadHeap(b, w)) })
	}
	if os.Getenv("MULTICACHE_BENCH_WRITE") == "" || len(got) != 2 {
		return
	}
	var sb strings.Builder
	for _, r := range got {
		sb.WriteString(r.table())
	}
	rs, dv := got[0], got[1]
	writeSection(b, "P1: heap per object on two workloads", fmt.Sprintf(`%s

Heap per cached object (the live heap, after GC, that the cache adds, divided by the objects it
holds) on two workloads, each bulk-seeded (fleet.BulkSeed) into a fleet of its own of %d
clusters × %d objects, half Pods and half ConfigMaps:

- ReplicaSet-like (fleet.WorkloadReplicaSetLike): copies of two template Pods with 60 distinct
  label maps, 10 images, equal resources, no status and no volumes; a Pod is %d B of JSON as
  served.
- diverse (fleet.WorkloadDiverse), modelled on kubernetes/perf-tests
  clusterloader2/testing/load/{deployment,statefulset,daemonset,job,configmap}.yaml and
  kube-burner/kube-burner-ocp cmd/config/cluster-density-v2/deployment-client.yml: Pods of
  ReplicaSets, StatefulSets, DaemonSets and Jobs with a label map of their own, a full kubelet
  status, the projected service-account volume, configMap, secret, PVC and hostPath volumes,
  env with valueFrom, resources, probes; ConfigMaps with data of their own; a Pod is %d B of
  JSON as served (a ConfigMap %d B).

Each variant ran %d times per workload in rotating order; medians with (min–max).

%s
Command: `+"`MULTICACHE_BENCH_WORKLOAD_OBJECTS=%d MULTICACHE_BENCH_WORKLOAD_CLUSTERS=%d MULTICACHE_BENCH_WORKLOAD_RUNS=%d go test -run '^$' -bench HeapWorkloads -benchtime 1x -timeout 60m -v ./test/bench/`"+`
`, machineLine(), rs.clusters, rs.objects/rs.clusters, rs.podJSON, dv.podJSON, dv.cmJSON, len(rs.perObject[variantB]), sb.String(),
		rs.objects/rs.clusters, rs.clusters, len(rs.perObject[variantB])))
	row := func(r *workloadHeap, name, want string, limit float64) goal {
		d, base := median(r.perObject[r.variantsOrder[1]]), median(r.perObject[variantB])
		return goal{"P1", "heap per object, multicache default ÷ B, " + name, want,
			fmt.Sprintf("%.2f× (%.0f B vs %.0f B)", d/base, d, base), met(d/base <= limit), ""}
	}
	recordGoals(b, row(rs, "ReplicaSet-like workload", "≤ 0.6×", 0.6), row(dv, "diverse workload", "≤ 0.8×", 0.8))
}

func measureWorkloadHeap(b *testing.B, w fleet.Workload) *workloadHeap {
	perCluster := harness.EnvInt("MULTICACHE_BENCH_WORKLOAD_OBJECTS", 20000)
	runs := harness.EnvInt("MULTICACHE_BENCH_WORKLOAD_RUNS", 5)
	clusters := harness.EnvInt("MULTICACHE_BENCH_WORKLOAD_CLUSTERS", 2)
	h := harness.Start(b, harness.Options{Clusters: clusters, Timeout: time.Hour})
	ctx := h.Ctx
	ns := 20
	perNS := max(2, perCluster/2/ns)
	if _, err := h.Loader.BulkSeed(ctx, fleet.BulkSpec{Namespaces: ns, PodsPerNamespace: perNS, ConfigMapsPerNamespace: perNS, Nodes: 50, Workload: w}); err != nil {
		b.Fatal(err)
	}
	r := &workloadHeap{workload: w, clusters: clusters, perObject: map[string][]float64{}}
	var cfgs []*rest.Config
	for i, c := range h.Fleet.Clusters {
		cfg := c.Config()
		cfg.QPS, cfg.Burst = -1, 0
		cfgs = append(cfgs, cfg)
		cs, err := kubernetes.NewForConfig(c.AdminConfig())
		if err != nil {
			b.Fatal(err)
		}
		pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		if err != nil {
			b.Fatal(err)
		}
		cms, err := cs.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{})
		if err != nil {
			b.Fatal(err)
		}
		r.objects += len(pods.Items) + len(cms.Items)
		if i == 0 {
			r.podJSON, r.cmJSON = meanJSON(b, pods.Items), meanJSON(b, cms.Items)
		}
	}
	variants := heapVariants()
	for _, v := range variants {
		r.variantsOrder = append(r.variantsOrder, v.name)
	}
	for run := range runs {
		for i := range variants {
			v := variants[(i+run)%len(variants)]
			res, stop, err := v.run(ctx, cfgs)
			if err != nil {
				b.Fatalf("%s: %v", v.name, err)
			}
			stop()
			per := float64(res.bytes) / float64(r.objects)
			r.perObject[v.name] = append(r.perObject[v.name], per)
			b.Logf("%s run %d %-60s heap %7.0f B/object", w, run+1, v.name, per)
			time.Sleep(2 * time.Second) // let the API servers settle
		}
	}
	b.ReportMetric(median(r.perObject[variants[1].name])/median(r.perObject[variantB]), "default-heap-ratio")
	b.Log("\n" + r.table())
	return r
}

func meanJSON[T any](b *testing.B, items []T) int {
	if len(items) == 0 {
		return 0
	}
	n := 0
	for i := range items {
		data, err := json.Marshal(&items[i])
		if err != nil {
			b.Fatal(err)
		}
		n += len(data)
	}
	return n / len(items)
}

// table is r as a Markdown table under a heading line.
func (r *workloadHeap) table() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "**%s workload**: %d objects in %d clusters; a Pod is %d B of JSON as served, a ConfigMap %d B.\n\n",
		r.workload, r.objects, r.clusters, r.podJSON, r.cmJSON)
	sb.WriteString("| variant | heap per object, median (min–max) | ÷ B |\n|---|---|---|\n")
	base := median(r.perObject[variantB])
	for _, name := range r.variantsOrder {
		xs := r.perObject[name]
		fmt.Fprintf(&sb, "| %s | %.0f B (%.0f–%.0f) | %.2f× |\n", name, median(xs), slices.Min(xs), slices.Max(xs), median(xs)/base)
	}
	sb.WriteString("\n")
	return sb.String()
}
