package fleet

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes/scheme"
)

// BulkSpec is what BulkSeed writes into each cluster.
type BulkSpec struct {
	Namespaces             int
	PodsPerNamespace       int
	ConfigMapsPerNamespace int
	// Nodes is how many node names Pods are spread over (spec.nodeName). No Node objects are
	// written: a query by node then returns PodsPerNamespace*Namespaces/Nodes Pods per cluster.
	Nodes int
	// Workload is what the Pods and ConfigMaps look like. Default WorkloadReplicaSetLike.
	Workload Workload
}

// Objects is how many objects spec puts in one cluster.
func (s BulkSpec) Objects() int {
	return s.Namespaces * (s.PodsPerNamespace + s.ConfigMapsPerNamespace)
}

// bulkTxnOps is how many puts go in one etcd transaction: etcd's default --max-txn-ops.
const bulkTxnOps = 128

// BulkSeed fills every cluster with spec's Pods and ConfigMaps far faster than the API can
// create them (about 900/s on two cores): it writes them straight into etcd, in the API
// server's own storage encoding (protobuf), bulkTxnOps per transaction. The API server then
// reads them as its own. To carry what the API server adds on create (defaults, managedFields),
// every object is a copy of a template created through the API: pod-0 and pod-1 (2 and 3
// containers) and cm-0 in load-0, with the name, UID, labels, node, images and env of the
// loader's j-th object (PodFor, the same labels as Seed). Namespaces are created through the
// API. With spec.Workload WorkloadDiverse the objects are DiversePods and DiverseConfigMap
// instead (see diverseCluster). It returns how many objects are in each cluster afterwards.
//
// Watch caches see the writes as ordinary etcd events; for a million objects, start the fleet
// with APIServerArgs "--watch-cache=false" so that ten API servers do not each hold a copy.
func (l *Loader) BulkSeed(ctx context.Context, spec BulkSpec) (int, error) {
	if spec.Namespaces < 1 || spec.PodsPerNamespace < 2 || spec.ConfigMapsPerNamespace < 1 || spec.Nodes < 1 {
		return 0, fmt.Errorf("bulk spec %+v: want at least 1 namespace, 2 pods, 1 configmap and 1 node", spec)
	}
	codec := scheme.Codecs.EncoderForVersion(protobuf.NewSerializer(scheme.Scheme, scheme.Scheme), corev1.SchemeGroupVersion)
	errs := make(chan error, len(l.fleet.Clusters))
	var wg sync.WaitGroup
	for _, c := range l.fleet.Clusters {
		wg.Go(func() {
			write := l.bulkCluster
			if spec.Workload == WorkloadDiverse {
				write = l.diverseCluster
			}
			if err := write(ctx, c, spec, codec); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return 0, err
	}
	return spec.Objects(), nil
}

func (l *Loader) bulkCluster(ctx context.Context, c *Cluster, spec BulkSpec, codec runtime.Encoder) error {
	cs := l.typed[c.Name]
	for i := range spec.Namespaces {
		if _, err := l.createNamespace(c.Name, nsName(i)).do(ctx); err != nil {
			return fmt.Errorf("cluster %q: bulk: namespace: %w", c.Name, err)
		}
	}
	var podT [2]*corev1.Pod
	for j := range podT {
		p, err := cs.CoreV1().Pods(nsName(0)).Create(ctx, PodFor(nsName(0), j, spec.Nodes), metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("cluster %q: bulk: template pod: %w", c.Name, err)
		}
		podT[j] = p
	}
	if _, err := l.createConfigMap(c.Name, nsName(0), 0).do(ctx); err != nil {
		return fmt.Errorf("cluster %q: bulk: template configmap: %w", c.Name, err)
	}
	cmT, err := cs.CoreV1().ConfigMaps(nsName(0)).Get(ctx, "cm-0", metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("cluster %q: bulk: template configmap: %w", c.Name, err)
	}

	return c.etcdBatches(ctx, func(put func(key string, obj runtime.Object) error) error {
		add := func(resource string, obj runtime.Object, m metav1.Object) error {
			m.SetUID(uuid.NewUUID())
			m.SetResourceVersion("")
			return put("/registry/"+resource+"/"+m.GetNamespace()+"/"+m.GetName(), obj)
		}
		for i := range spec.Namespaces {
			ns := nsName(i)
			for j := range spec.PodsPerNamespace {
				if i == 0 && j < len(podT) {
					continue
				}
				want := PodFor(ns, j, spec.Nodes)
				p := podT[j%2].DeepCopy()
				p.Namespace, p.Name, p.Labels, p.Spec.NodeName = ns, want.Name, want.Labels, want.Spec.NodeName
				for k := range p.Spec.Containers {
					p.Spec.Containers[k].Image, p.Spec.Containers[k].Env = want.Spec.Containers[k].Image, want.Spec.Containers[k].Env
				}
				if err := add("pods", p, p); err != nil {
					return err
				}
			}
			for j := range spec.ConfigMapsPerNamespace {
				if i == 0 && j == 0 {
					continue
				}
				m := cmT.DeepCopy()
				m.Namespace, m.Name, m.Labels = ns, fmt.Sprintf("cm-%d", j), labels(j)
				m.Data = map[string]string{"config.yaml": fmt.Sprintf("replicas: %d\nlevel: info\n", j%7), "owner": fmt.Sprintf("team-%d", j%5)}
				if err := add("configmaps", m, m); err != nil {
					return err
				}
			}
		}
		return nil
	}, codec)
}

// etcdPut is one key and its value.
type etcdPut struct{ key, value string }

// etcdTxnPut writes puts in one etcd transaction, over the JSON gateway.
func (c *Cluster) etcdTxnPut(ctx context.Context, puts []etcdPut) error {
	type kv struct {
		Key   string `json:"key"`
		Value string `json:"value"`
	}
	type op struct {
		RequestPut kv `json:"requestPut"`
	}
	ops := make([]op, len(puts))
	for i, p := range puts {
		ops[i] = op{kv{base64.StdEncoding.EncodeToString([]byte(p.key)), base64.StdEncoding.EncodeToString([]byte(p.value))}}
	}
	body, err := json.Marshal(map[string]any{"success": ops})
	if err != nil {
		return err
	}
	return c.etcdPost(ctx, "/v3/kv/txn", string(body), nil)
}
