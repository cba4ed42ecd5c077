package fleet

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// WidgetGVR is the custom resource the loader installs (in the clusters a Spec names).
var WidgetGVR = schema.GroupVersionResource{Group: "example.multicache.io", Version: "v1", Resource: "widgets"}

// Images is the pool the loader draws container images from.
var Images = []string{
	"registry.k8s.io/pause:3.10", "nginx:1.27.3", "redis:7.4.1", "postgres:17.2",
	"ghcr.io/example/api:v1.8.0", "ghcr.io/example/worker:v1.8.0", "envoyproxy/envoy:v1.32.1",
	"quay.io/prometheus/node-exporter:v1.8.2", "busybox:1.37", "golang:1.23-alpine",
}

// Zones are the zone labels Nodes get, round robin.
var Zones = []string{"zone-a", "zone-b", "zone-c"}

// Spec says what Seed writes into every cluster.
type Spec struct {
	Namespaces              int
	Nodes                   int
	PodsPerNamespace        int
	DeploymentsPerNamespace int
	ConfigMapsPerNamespace  int
	// WidgetsPerNamespace custom resources are written in the clusters listed in CRDClusters,
	// which also get the CRD. Others get neither.
	WidgetsPerNamespace int
	CRDClusters         []string
	// Workers is the number of concurrent writers per cluster. Default 48.
	Workers int
}

// SpecForObjects spreads about n objects per cluster over the kinds: 60% Pods, 25%
// ConfigMaps, 5% Deployments, 5% Widgets, the rest Namespaces and Nodes.
func SpecForObjects(n int, crdClusters []string) Spec {
	ns := max(1, n/100)
	return Spec{
		Namespaces:              ns,
		Nodes:                   max(1, n/50),
		PodsPerNamespace:        max(1, n*60/100/ns),
		ConfigMapsPerNamespace:  max(1, n*25/100/ns),
		DeploymentsPerNamespace: max(0, n*5/100/ns),
		WidgetsPerNamespace:     max(0, n*5/100/ns),
		CRDClusters:             crdClusters,
	}
}

// Ref names one object written, with the identity the server gave it.
type Ref struct {
	Resource        string // plural, e.g. "pods"
	Namespace, Name string
	UID             types.UID
	ResourceVersion string
}

// Written is what a loader wrote, per cluster.
type Written struct {
	mu      sync.Mutex
	Objects map[string][]Ref
	// Creates counts successful creates; Elapsed is the wall time of the writes.
	Creates int64
	Elapsed time.Duration
}

func (w *Written) add(cluster string, r Ref) {
	w.mu.Lock()
	w.Objects[cluster] = append(w.Objects[cluster], r)
	w.mu.Unlock()
}

// Rate is creates per second over the run.
func (w *Written) Rate() float64 {
	if w.Elapsed <= 0 {
		return 0
	}
	return float64(w.Creates) / w.Elapsed.Seconds()
}

// Count returns how many objects of resource were written to cluster.
func (w *Written) Count(cluster, resource string) int {
	n := 0
	for _, r := range w.Objects[cluster] {
		if r.Resource == resource {
			n++
		}
	}
	return n
}

// Loader writes objects into a fleet's clusters through system:masters clients over protobuf.
type Loader struct {
	fleet *Fleet
	typed map[string]kubernetes.Interface
	dyn   map[string]dynamic.Interface
	ext   map[string]apiextclient.Interface
}

// NewLoader builds clients for every cluster of f.
func NewLoader(f *Fleet) (*Loader, error) {
	l := &Loader{fleet: f, typed: map[string]kubernetes.Interface{}, dyn: map[string]dynamic.Interface{}, ext: map[string]apiextclient.Interface{}}
	for _, c := range f.Clusters {
		cfg := c.AdminConfig()
		pcfg := rest.CopyConfig(cfg)
		cfg.WarningHandler = rest.NoWarnings{}
		pcfg.WarningHandler = rest.NoWarnings{}
		pcfg.ContentType = "application/vnd.kubernetes.protobuf"
		pcfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
		var err error
		if l.typed[c.Name], err = kubernetes.NewForConfig(pcfg); err != nil {
			return nil, err
		}
		if l.dyn[c.Name], err = dynamic.NewForConfig(cfg); err != nil {
			return nil, err
		}
		if l.ext[c.Name], err = apiextclient.NewForConfig(cfg); err != nil {
			return nil, err
		}
	}
	return l, nil
}

type job struct {
	cluster string
	do      func(ctx context.Context) (Ref, error)
}

// Seed writes spec into every cluster concurrently: first Namespaces, Nodes and the CRD, then
// the namespaced objects. It returns everything it wrote.
func (l *Loader) Seed(ctx context.Context, spec Spec) (*Written, error) {
	if spec.Workers == 0 {
		spec.Workers = 48
	}
	w := &Written{Objects: map[string][]Ref{}}
	start := time.Now()
	crd := map[string]bool{}
	for _, name := range spec.CRDClusters {
		if _, err := l.fleet.Cluster(name); err != nil {
			return nil, fmt.Errorf("spec.CRDClusters: %w", err)
		}
		crd[name] = true
	}
	var first, second []job
	for _, c := range l.fleet.Clusters {
		cn := c.Name
		for i := range spec.Namespaces {
			first = append(first, l.createNamespace(cn, nsName(i)))
		}
		for i := range spec.Nodes {
			first = append(first, l.createNode(cn, i))
		}
		if crd[cn] {
			if err := l.EnsureCRD(ctx, cn); err != nil {
				return nil, err
			}
		}
		for i := range spec.Namespaces {
			ns := nsName(i)
			for j := range spec.PodsPerNamespace {
				second = append(second, l.createPod(cn, ns, j, max(1, spec.Nodes)))
			}
			for j := range spec.ConfigMapsPerNamespace {
				second = append(second, l.createConfigMap(cn, ns, j))
			}
			for j := range spec.DeploymentsPerNamespace {
				second = append(second, l.createDeployment(cn, ns, j))
			}
			if crd[cn] {
				for j := range spec.WidgetsPerNamespace {
					second = append(second, l.createWidget(cn, ns, j))
				}
			}
		}
	}
	workers := spec.Workers * len(l.fleet.Clusters)
	if err := l.run(ctx, first, workers, w); err != nil {
		return w, err
	}
	if err := l.run(ctx, second, workers, w); err != nil {
		return w, err
	}
	w.Elapsed = time.Since(start)
	for _, refs := range w.Objects {
		sort.Slice(refs, func(i, j int) bool {
			if refs[i].Resource != refs[j].Resource {
				return refs[i].Resource < refs[j].Resource
			}
			if refs[i].Namespace != refs[j].Namespace {
				return refs[i].Namespace < refs[j].Namespace
			}
			return refs[i].Name < refs[j].Name
		})
	}
	return w, nil
}

// run executes jobs on n workers, interleaving clusters; the first error stops the run.
func (l *Loader) run(ctx context.Context, jobs []job, n int, w *Written) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Interleave by cluster so all API servers work at once.
	rand.Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })
	ch := make(chan job)
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range ch {
				ref, err := retry(ctx, func() (Ref, error) { return j.do(ctx) })
				if apierrors.IsAlreadyExists(err) {
					// Seeding is idempotent: what exists already is kept, and not counted.
					continue
				}
				if err != nil {
					once.Do(func() { firstErr = fmt.Errorf("cluster %q: %w", j.cluster, err); cancel() })
					continue
				}
				atomic.AddInt64(&w.Creates, 1)
				w.add(j.cluster, ref)
			}
		}()
	}
	for _, j := range jobs {
		select {
		case ch <- j:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	close(ch)
	wg.Wait()
	if firstErr == nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return firstErr
}

// retry retries throttling and transient server errors a few times.
func retry(ctx context.Context, f func() (Ref, error)) (Ref, error) {
	var ref Ref
	var err error
	for attempt := range 6 {
		ref, err = f()
		if err == nil || !(apierrors.IsTooManyRequests(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsInternalError(err)) {
			return ref, err
		}
		select {
		case <-ctx.Done():
			return ref, ctx.Err()
		case <-time.After(time.Duration(50*(attempt+1)) * time.Millisecond):
		}
	}
	return ref, err
}

func nsName(i int) string { return "load-" + strconv.Itoa(i) }

func ref(resource string, m metav1.Object) Ref {
	return Ref{Resource: resource, Namespace: m.GetNamespace(), Name: m.GetName(), UID: m.GetUID(), ResourceVersion: m.GetResourceVersion()}
}

func labels(i int) map[string]string {
	return map[string]string{
		"app":  "app-" + strconv.Itoa(i%20),
		"tier": []string{"frontend", "backend", "cache"}[i%3],
		"team": "team-" + strconv.Itoa(i%5),
	}
}

func (l *Loader) createNamespace(cluster, name string) job {
	return job{cluster, func(ctx context.Context) (Ref, error) {
		o, err := l.typed[cluster].CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"multicache.io/load": "true"}},
		}, metav1.CreateOptions{})
		if err != nil {
			return Ref{}, err
		}
		return ref("namespaces", o), nil
	}}
}

// NodeName is the name of the loader's i-th Node.
func NodeName(i int) string { return "node-" + strconv.Itoa(i) }

func (l *Loader) createNode(cluster string, i int) job {
	return job{cluster, func(ctx context.Context) (Ref, error) {
		o, err := l.typed[cluster].CoreV1().Nodes().Create(ctx, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: NodeName(i), Labels: map[string]string{
				"topology.kubernetes.io/zone":      Zones[i%len(Zones)],
				"kubernetes.io/hostname":           NodeName(i),
				"node.kubernetes.io/instance-type": []string{"m5.large", "m5.xlarge", "c6i.2xlarge"}[i%3],
			}},
			Spec: corev1.NodeSpec{PodCIDR: fmt.Sprintf("10.%d.%d.0/24", 100+i/256%100, i%256)},
		}, metav1.CreateOptions{})
		if err != nil {
			return Ref{}, err
		}
		return ref("nodes", o), nil
	}}
}

// PodFor builds the loader's j-th Pod in ns: 2–3 containers with images from Images, a
// nodeName among nodes, resource requests and labels.
func PodFor(ns string, j, nodes int) *corev1.Pod {
	nc := 2 + j%2
	cs := make([]corev1.Container, nc)
	for k := range cs {
		cs[k] = corev1.Container{
			Name:  "c" + strconv.Itoa(k),
			Image: Images[(j+k*3)%len(Images)],
			Ports: []corev1.ContainerPort{{Name: "http-" + strconv.Itoa(k), ContainerPort: int32(8080 + k)}},
			Env:   []corev1.EnvVar{{Name: "MODE", Value: "production"}, {Name: "REPLICA", Value: strconv.Itoa(j)}},
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi"),
			}},
		}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pod-" + strconv.Itoa(j), Namespace: ns, Labels: labels(j)},
		Spec: corev1.PodSpec{
			NodeName:       NodeName(j % nodes),
			InitContainers: []corev1.Container{{Name: "init", Image: "busybox:1.37", Command: []string{"sh", "-c", "true"}}},
			Containers:     cs,
		},
	}
}

func (l *Loader) createPod(cluster, ns string, j, nodes int) job {
	return job{cluster, func(ctx context.Context) (Ref, error) {
		o, err := l.typed[cluster].CoreV1().Pods(ns).Create(ctx, PodFor(ns, j, nodes), metav1.CreateOptions{})
		if err != nil {
			return Ref{}, err
		}
		return ref("pods", o), nil
	}}
}

func (l *Loader) createConfigMap(cluster, ns string, j int) job {
	return job{cluster, func(ctx context.Context) (Ref, error) {
		o, err := l.typed[cluster].CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "cm-" + strconv.Itoa(j), Namespace: ns, Labels: labels(j)},
			Data:       map[string]string{"config.yaml": "replicas: " + strconv.Itoa(j%7) + "\nlevel: info\n", "owner": "team-" + strconv.Itoa(j%5)},
		}, metav1.CreateOptions{})
		if err != nil {
			return Ref{}, err
		}
		return ref("configmaps", o), nil
	}}
}

func (l *Loader) createDeployment(cluster, ns string, j int) job {
	return job{cluster, func(ctx context.Context) (Ref, error) {
		replicas := int32(1 + j%3)
		lb := map[string]string{"app": "deploy-" + strconv.Itoa(j)}
		o, err := l.typed[cluster].AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "deploy-" + strconv.Itoa(j), Namespace: ns, Labels: labels(j)},
			Spec: appsv1.DeploymentSpec{
				Replicas: &replicas,
				Selector: &metav1.LabelSelector{MatchLabels: lb},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: lb},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: Images[j%len(Images)]}}},
				},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			return Ref{}, err
		}
		return ref("deployments", o), nil
	}}
}

func (l *Loader) createWidget(cluster, ns string, j int) job {
	return job{cluster, func(ctx context.Context) (Ref, error) {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "example.multicache.io/v1",
			"kind":       "Widget",
			"metadata":   map[string]any{"name": "widget-" + strconv.Itoa(j), "namespace": ns, "labels": map[string]any{"color": []string{"red", "green", "blue"}[j%3]}},
			"spec":       map[string]any{"size": int64(j % 10), "color": []string{"red", "green", "blue"}[j%3]},
		}}
		o, err := l.dyn[cluster].Resource(WidgetGVR).Namespace(ns).Create(ctx, u, metav1.CreateOptions{})
		if err != nil {
			return Ref{}, err
		}
		return ref("widgets", o), nil
	}}
}

// WidgetCRD is the CustomResourceDefinition of WidgetGVR.
func WidgetCRD() *apiextensionsv1.CustomResourceDefinition {
	preserve := true
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.example.multicache.io"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "example.multicache.io",
			Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList", ShortNames: []string{"wd"}},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: &preserve,
				}},
				AdditionalPrinterColumns: []apiextensionsv1.CustomResourceColumnDefinition{
					{Name: "Color", Type: "string", JSONPath: ".spec.color"},
					{Name: "Size", Type: "integer", JSONPath: ".spec.size", Priority: 1},
					{Name: "Age", Type: "date", JSONPath: ".metadata.creationTimestamp"},
				},
			}},
		},
	}
}

// EnsureCRD installs the Widget CRD in cluster and waits until it is Established and served.
// A CRD still being deleted (its objects are removed before it goes) is waited out and then
// created anew: taking it for the installed one would wait on a resource about to vanish.
func (l *Loader) EnsureCRD(ctx context.Context, cluster string) error {
	ext, ok := l.ext[cluster]
	if !ok {
		return fmt.Errorf("cluster %q: not in this fleet", cluster)
	}
	crds := ext.ApiextensionsV1().CustomResourceDefinitions()
	var last error // the last error seen, kept while polling rides out a brief one
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		cur, err := crds.Get(ctx, WidgetCRD().Name, metav1.GetOptions{})
		switch {
		case err == nil && cur.DeletionTimestamp == nil:
			return true, nil
		case err == nil: // terminating: wait for it to go
			last = errors.New("the CRD is still being deleted")
			return false, nil
		case !apierrors.IsNotFound(err):
			last = fmt.Errorf("get CRD: %w", err)
			return false, nil
		}
		if _, err := crds.Create(ctx, WidgetCRD(), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			last = fmt.Errorf("create CRD: %w", err)
		}
		return false, nil // the next round checks what was created
	})
	if err != nil {
		return fmt.Errorf("cluster %q: install CRD: %w (last: %v)", cluster, err, last)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := l.dyn[cluster].Resource(WidgetGVR).List(ctx, metav1.ListOptions{Limit: 1})
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("cluster %q: CRD not served: %w", cluster, err)
	}
	return nil
}

// DeleteCRD deletes the Widget CRD from cluster and waits until it is gone (its objects go
// first, so a CRD with many objects takes a while).
func (l *Loader) DeleteCRD(ctx context.Context, cluster string) error {
	ext, ok := l.ext[cluster]
	if !ok {
		return fmt.Errorf("cluster %q: not in this fleet", cluster)
	}
	crds := ext.ApiextensionsV1().CustomResourceDefinitions()
	err := crds.Delete(ctx, WidgetCRD().Name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("cluster %q: delete CRD: %w", cluster, err)
	}
	last := errors.New("the CRD is still being deleted")
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := crds.Get(ctx, WidgetCRD().Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return true, nil
		case err != nil:
			last = fmt.Errorf("get CRD: %w", err)
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("cluster %q: delete CRD: %w (last: %v)", cluster, err, last)
	}
	return nil
}

// ChurnSpec drives Churn: Rate operations per second in total across the fleet, for Duration.
type ChurnSpec struct {
	Rate     float64
	Duration time.Duration
	// Namespace is where churn happens in every cluster; it is created if missing.
	Namespace string
	// Workers is the number of concurrent writers per cluster. Default 32.
	Workers int
	// MaxLive caps the objects each worker keeps; at the cap its creates become deletes, so the
	// object count reaches a steady state. 0: no cap.
	MaxLive int
	// Prefix starts every object name (then the worker, then a sequence number), so that
	// successive churns in one namespace do not collide. Default "w".
	Prefix string
}

// WrittenAtKey is the ConfigMap data key where Churn records when it sent a create or update
// (Unix nanoseconds), so that a handler can measure write → event latency.
const WrittenAtKey = "written-at"

// ChurnResult counts what Churn did.
type ChurnResult struct {
	Creates, Updates, Deletes, Errors int64
	Elapsed                           time.Duration
}

// Ops is the number of successful operations.
func (r ChurnResult) Ops() int64 { return r.Creates + r.Updates + r.Deletes }

// Churn creates, updates and deletes ConfigMaps in spec.Namespace of every cluster at
// spec.Rate operations per second (about 50% creates, 35% updates, 15% deletes). Each worker
// owns its own objects, so operations on one object are ordered.
func (l *Loader) Churn(ctx context.Context, spec ChurnSpec) (ChurnResult, error) {
	if spec.Rate <= 0 || spec.Duration <= 0 {
		return ChurnResult{}, errors.New("churn: Rate and Duration must be positive")
	}
	if spec.Namespace == "" {
		spec.Namespace = "churn"
	}
	if spec.Workers == 0 {
		spec.Workers = 32
	}
	if spec.Prefix == "" {
		spec.Prefix = "w"
	}
	for _, c := range l.fleet.Clusters {
		// A cluster that is down now is not skipped: its writes fail and count as errors, and
		// it takes part again once it is back.
		_, _ = l.typed[c.Name].CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: spec.Namespace}}, metav1.CreateOptions{})
	}
	limiter := rate.NewLimiter(rate.Limit(spec.Rate), max(1, int(spec.Rate/20)))
	ctx, cancel := context.WithTimeout(ctx, spec.Duration)
	defer cancel()
	var res ChurnResult
	start := time.Now()
	var wg sync.WaitGroup
	for _, c := range l.fleet.Clusters {
		cs := l.typed[c.Name]
		for w := range spec.Workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				churnWorker(ctx, cs, spec.Namespace, spec.Prefix+strconv.Itoa(w), spec.MaxLive, limiter, &res)
			}()
		}
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	return res, nil
}

func churnWorker(ctx context.Context, cs kubernetes.Interface, ns, prefix string, maxLive int, lim *rate.Limiter, res *ChurnResult) {
	var live []string // names of this worker's live ConfigMaps, oldest first
	seq := 0
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(len(prefix))))
	cms := cs.CoreV1().ConfigMaps(ns)
	for {
		if err := lim.Wait(ctx); err != nil {
			return
		}
		p := rng.IntN(100)
		var err error
		if p < 50 && maxLive > 0 && len(live) >= maxLive {
			p = 99 // at the cap: delete instead
		}
		switch {
		case p < 50 || len(live) == 0:
			name := fmt.Sprintf("%s-%d", prefix, seq)
			seq++
			_, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels(seq)}, Data: map[string]string{"v": "0", WrittenAtKey: strconv.FormatInt(time.Now().UnixNano(), 10)}}, metav1.CreateOptions{})
			if err == nil {
				live = append(live, name)
				atomic.AddInt64(&res.Creates, 1)
			}
		case p < 85:
			name := live[rng.IntN(len(live))]
			patch := []byte(fmt.Sprintf(`{"data":{"v":"%d",%q:"%d"}}`, rng.Int(), WrittenAtKey, time.Now().UnixNano()))
			_, err = cms.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
			if err == nil {
				atomic.AddInt64(&res.Updates, 1)
			}
		default:
			name := live[0]
			err = cms.Delete(ctx, name, metav1.DeleteOptions{})
			if err == nil || apierrors.IsNotFound(err) {
				live = live[1:]
				if err == nil {
					atomic.AddInt64(&res.Deletes, 1)
				}
			}
		}
		if err != nil && ctx.Err() == nil {
			atomic.AddInt64(&res.Errors, 1)
		}
	}
}
