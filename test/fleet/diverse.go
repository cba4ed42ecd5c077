package fleet

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/diff"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// Workload is the shape of the objects BulkSeed writes.
type Workload int

const (
	// WorkloadReplicaSetLike is copies of PodFor's Pods and of one ConfigMap: 60 distinct label
	// maps, 10 images, equal resources, no status, no volumes.
	WorkloadReplicaSetLike Workload = iota
	// WorkloadDiverse is DiversePods and DiverseConfigMap: unique label maps, full status,
	// volumes, env, probes and four owner kinds.
	WorkloadDiverse
)

func (w Workload) String() string {
	switch w {
	case WorkloadReplicaSetLike:
		return "ReplicaSet-like"
	case WorkloadDiverse:
		return "diverse"
	}
	return "Workload(" + strconv.Itoa(int(w)) + ")"
}

// The diverse workload is modelled on public load-test templates (structure and proportions,
// not their text):
//   - kubernetes/perf-tests clusterloader2/testing/load/deployment.yaml, statefulset.yaml,
//     daemonset.yaml, job.yaml and configmap.yaml: Deployments, StatefulSets, DaemonSets and
//     Jobs of a few replicas each, requests, configMap and secret volumes, not-ready and
//     unreachable tolerations, env on DaemonSet Pods;
//   - kube-burner/kube-burner-ocp cmd/config/cluster-density-v2/deployment-client.yml:
//     per-Deployment random env values, env from endpoints, exec/http probes, several configMap
//     and secret volumes, a downward-API volume, topology spread.
// Pods carry what a v1.37 control plane and kubelet write: the kube-api-access projected
// volume, default tolerations, defaulted fields, owner references, controller labels, and a
// Running (or, for some Jobs, Succeeded) status with conditions, container statuses (image IDs,
// container IDs, start times, resources, volume mounts, user), host and pod IPs and QoS class.
//
// Everything is a function of its inputs. Workload-level values (owner names, images, env,
// resources, hashes, ConfigMap data) depend on the namespace and owner only, so every cluster
// runs the same workloads, as a fleet does; Pod-level values (name suffixes, UIDs, IPs, node,
// container IDs, times) also depend on the cluster.

type ownerKind int

const (
	ownerReplicaSet ownerKind = iota
	ownerStatefulSet
	ownerDaemonSet
	ownerJob
)

type diverseApp struct {
	name, image, portName string
	port                  int32
}

var (
	replicaSetApps = []string{"api", "web", "checkout", "cart", "payments", "search", "auth", "catalog",
		"gateway", "notifications", "recommendations", "inventory"}
	statefulSetApps = []diverseApp{
		{"postgres", "postgres:17.2", "postgres", 5432},
		{"redis", "redis:7.4.1", "redis", 6379},
		{"kafka", "bitnami/kafka:3.8.0", "kafka", 9092},
		{"elasticsearch", "docker.elastic.co/elasticsearch/elasticsearch:8.15.3", "http", 9200},
	}
	daemonSetApps = []diverseApp{
		{"node-exporter", "quay.io/prometheus/node-exporter:v1.8.2", "metrics", 9100},
		{"fluent-bit", "cr.fluentbit.io/fluent/fluent-bit:3.1.9", "http", 2020},
		{"csi-node", "registry.k8s.io/sig-storage/csi-node-driver-registrar:v2.12.0", "healthz", 9809},
	}
	jobApps    = []string{"report", "migrate", "backup", "etl"}
	components = []string{"server", "backend", "frontend", "worker"}
	logLevels  = []string{"info", "info", "info", "debug", "warn"}
	cpus       = []string{"50m", "100m", "250m", "500m"}
	memories   = []string{"64Mi", "128Mi", "256Mi", "512Mi"}
)

// diverseBase is the fixed "now" of the diverse workload; objects are up to 30 days older.
var diverseBase = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

type diverseOwner struct {
	kind     ownerKind
	index    int
	app      diverseApp
	name     string // the owning object's name
	workload string // the Deployment's name for ReplicaSets, else name
	uid      types.UID
	replicas int
	// ReplicaSet Pods: an init container, a metrics sidecar, a restartedAt annotation.
	init, sidecar, restarted bool
	// Jobs: completionMode Indexed; Pods have completed.
	indexed, succeeded bool
	hash               string
	cpu, mem           string
	logLevel           string
	secrets            [2]string
	peer               string
	created            time.Time
	firstNode          int
}

// diversePod is one generated Pod, the key of the template its managedFields come from, and the
// values of its own that appear in managedFields keys.
type diversePod struct {
	pod    *corev1.Pod
	shape  string
	tokens []string
}

// DiversePods returns the n Pods of the diverse workload in namespace ns of cluster, spread over
// nodes node names, as the API server serves them apart from managedFields and
// resourceVersion.
func DiversePods(cluster, ns string, n, nodes int) []*corev1.Pod {
	var out []*corev1.Pod
	for _, d := range diversePods(cluster, ns, n, nodes) {
		out = append(out, d.pod)
	}
	return out
}

func diversePods(cluster, ns string, n, nodes int) []diversePod {
	var out []diversePod
	for o := 0; len(out) < n; o++ {
		ow := diverseOwnerFor(cluster, ns, o, nodes)
		for r := 0; r < ow.replicas && len(out) < n; r++ {
			out = append(out, diversePodFor(cluster, ns, ow, r, len(out), nodes))
		}
	}
	return out
}

func diverseOwnerFor(cluster, ns string, o, nodes int) *diverseOwner {
	rng := rngFor("owner", ns, strconv.Itoa(o))
	ow := &diverseOwner{index: o, uid: randUID(rngFor(cluster, "owner", ns, strconv.Itoa(o)))}
	ow.created = diverseBase.Add(-time.Duration(rng.IntN(30*24*3600)) * time.Second)
	ow.cpu, ow.mem, ow.logLevel = pick(rng, cpus), pick(rng, memories), pick(rng, logLevels)
	ow.secrets = [2]string{randString(rng, alnum, 64), randString(rng, alnum, 64)}
	ow.peer = pick(rng, replicaSetApps) + "-" + strconv.Itoa(rng.IntN(max(1, o)+1))
	switch k := rng.IntN(100); {
	case k < 60:
		ow.kind = ownerReplicaSet
		app := pick(rng, replicaSetApps)
		ow.app = diverseApp{app, fmt.Sprintf("ghcr.io/acme/%s:v1.%d.%d", app, rng.IntN(20), rng.IntN(10)), "http", 8080}
		ow.workload = app + "-" + strconv.Itoa(o)
		ow.hash = randString(rng, nameChars, 10)
		ow.name = ow.workload + "-" + ow.hash
		ow.replicas = 2 + rng.IntN(3)
		ow.init, ow.sidecar, ow.restarted = rng.IntN(3) == 0, rng.IntN(3) == 0, rng.IntN(4) == 0
	case k < 75:
		ow.kind = ownerStatefulSet
		ow.app = pick(rng, statefulSetApps)
		ow.name = ow.app.name + "-" + strconv.Itoa(o)
		ow.hash = ow.name + "-" + randString(rng, nameChars, 10)
		ow.replicas = 2 + rng.IntN(2)
	case k < 85:
		ow.kind = ownerDaemonSet
		ow.app = pick(rng, daemonSetApps)
		ow.name = ow.app.name + "-" + strconv.Itoa(o)
		ow.hash = randString(rng, nameChars, 10)
		ow.replicas = min(nodes, 3)
	default:
		ow.kind = ownerJob
		app := pick(rng, jobApps)
		ow.app = diverseApp{app, fmt.Sprintf("ghcr.io/acme/%s-job:v2.%d.0", app, rng.IntN(8)), "", 0}
		ow.name = fmt.Sprintf("%s-%d-%d", app, o, 29000000+rng.IntN(1000000))
		ow.replicas = 1 + rng.IntN(2)
		ow.indexed, ow.succeeded = rng.IntN(2) == 0, rng.IntN(2) == 0
	}
	ow.workload = cmp.Or(ow.workload, ow.name)
	ow.firstNode = rngFor(cluster, "owner-node", ns, strconv.Itoa(o)).IntN(nodes)
	return ow
}

// diversePodFor builds replica r of ow, the j-th Pod of ns.
func diversePodFor(cluster, ns string, ow *diverseOwner, r, j, nodes int) diversePod {
	rng := rngFor(cluster, "pod", ns, strconv.Itoa(j))
	suffix := randString(rng, nameChars, 5)
	node := rng.IntN(nodes)
	if ow.kind == ownerDaemonSet {
		node = (ow.firstNode + r) % nodes
	}
	created := ow.created.Add(time.Duration(rng.IntN(3600)) * time.Second)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, UID: randUID(rng), Generation: 1,
			CreationTimestamp: metav1.NewTime(created),
		},
		Spec: corev1.PodSpec{
			NodeName:                      NodeName(node),
			RestartPolicy:                 corev1.RestartPolicyAlways,
			TerminationGracePeriodSeconds: ptr.To[int64](30),
			DNSPolicy:                     corev1.DNSClusterFirst,
			SchedulerName:                 corev1.DefaultSchedulerName,
			EnableServiceLinks:            ptr.To(true),
			Priority:                      ptr.To[int32](0),
			PreemptionPolicy:              ptr.To(corev1.PreemptLowerPriority),
			SecurityContext:               &corev1.PodSecurityContext{},
			Tolerations: []corev1.Toleration{
				{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
				{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
			},
		},
	}
	m := &p.ObjectMeta
	ref := func(apiVersion, kind string) {
		m.OwnerReferences = []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: ow.name, UID: ow.uid,
			Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}
	}
	sa := "kube-api-access-" + randString(rng, nameChars, 5)
	var shape []string
	switch ow.kind {
	case ownerReplicaSet:
		m.Name = ow.name + "-" + suffix
		ref("apps/v1", "ReplicaSet")
		m.Labels = map[string]string{
			"app.kubernetes.io/name": ow.app.name, "app.kubernetes.io/instance": ow.workload,
			"app.kubernetes.io/component": components[ow.index%len(components)],
			"pod-template-hash":           ow.hash, "multicache.io/pod-name": m.Name,
		}
		if ow.restarted {
			m.Annotations = map[string]string{"kubectl.kubernetes.io/restartedAt": ow.created.Format(time.RFC3339)}
		}
		replicaSetSpec(&p.Spec, ns, ow)
		shape = []string{"rs", strconv.FormatBool(ow.init), strconv.FormatBool(ow.sidecar), strconv.FormatBool(ow.restarted)}
	case ownerStatefulSet:
		m.Name = ow.name + "-" + strconv.Itoa(r)
		ref("apps/v1", "StatefulSet")
		m.Labels = map[string]string{
			"app.kubernetes.io/name": ow.app.name, "app.kubernetes.io/instance": ow.name,
			"controller-revision-hash": ow.hash, "statefulset.kubernetes.io/pod-name": m.Name,
			"apps.kubernetes.io/pod-index": strconv.Itoa(r),
		}
		m.Annotations = map[string]string{"checksum/config": sha(ow.name + ow.hash)}
		statefulSetSpec(&p.Spec, m.Name, ow)
		shape = []string{"sts", ow.app.name}
	case ownerDaemonSet:
		m.Name = ow.name + "-" + suffix
		ref("apps/v1", "DaemonSet")
		m.Labels = map[string]string{
			"app.kubernetes.io/name": ow.app.name, "controller-revision-hash": ow.hash,
			"pod-template-generation": "1", "multicache.io/pod-name": m.Name,
		}
		m.Annotations = map[string]string{"checksum/config": sha(ow.name + ow.hash)}
		daemonSetSpec(&p.Spec, ow)
		shape = []string{"ds", ow.app.name}
	case ownerJob:
		m.Name = ow.name + "-" + suffix
		if ow.indexed {
			m.Name = ow.name + "-" + strconv.Itoa(r) + "-" + suffix
		}
		ref("batch/v1", "Job")
		m.Labels = map[string]string{
			"batch.kubernetes.io/controller-uid": string(ow.uid), "batch.kubernetes.io/job-name": ow.name,
			"controller-uid": string(ow.uid), "job-name": ow.name, "multicache.io/pod-name": m.Name,
		}
		if ow.indexed {
			idx := strconv.Itoa(r)
			m.Labels["batch.kubernetes.io/job-completion-index"] = idx
			m.Annotations = map[string]string{"batch.kubernetes.io/job-completion-index": idx}
			p.Spec.Hostname = ow.name + "-" + idx
		}
		if !ow.succeeded {
			m.Finalizers = []string{"batch.kubernetes.io/job-tracking"}
		}
		jobSpec(&p.Spec, ow)
		shape = []string{"job", strconv.FormatBool(ow.indexed), strconv.FormatBool(ow.succeeded)}
	}
	p.Spec.Volumes = append(p.Spec.Volumes, serviceAccountVolume(sa))
	for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range cs {
			cs[i].VolumeMounts = append(cs[i].VolumeMounts, corev1.VolumeMount{Name: sa, ReadOnly: true, MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"})
			defaultContainer(&cs[i])
		}
	}
	hostIP := fmt.Sprintf("172.20.%d.%d", node/250, 1+node%250)
	podIP := fmt.Sprintf("10.%d.%d.%d", 128+node/256%128, node%256, 2+rng.IntN(250))
	if p.Spec.HostNetwork {
		podIP = hostIP
	}
	p.Status = diverseStatus(rng, p, ow, created, hostIP, podIP)
	return diversePod{pod: p, shape: strings.Join(shape, "/"), tokens: []string{string(ow.uid), sa, podIP, hostIP}}
}

func serviceAccountVolume(name string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{ExpirationSeconds: ptr.To[int64](3607), Path: "token"}},
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
				Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "namespace",
				FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}}}},
		},
		DefaultMode: ptr.To[int32](420),
	}}}
}

// defaultContainer sets what the API server defaults in a container.
func defaultContainer(c *corev1.Container) {
	c.TerminationMessagePath = corev1.TerminationMessagePathDefault
	c.TerminationMessagePolicy = corev1.TerminationMessageReadFile
	c.ImagePullPolicy = corev1.PullIfNotPresent
	for i := range c.Ports {
		c.Ports[i].Protocol = corev1.ProtocolTCP
	}
	for i := range c.Env {
		if f := c.Env[i].ValueFrom; f != nil && f.FieldRef != nil {
			f.FieldRef.APIVersion = "v1"
		}
	}
	for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
		if p == nil {
			continue
		}
		p.TimeoutSeconds = max(p.TimeoutSeconds, 1)
		p.PeriodSeconds = cmp.Or(p.PeriodSeconds, 10)
		p.SuccessThreshold = max(p.SuccessThreshold, 1)
		p.FailureThreshold = cmp.Or(p.FailureThreshold, 3)
		if p.HTTPGet != nil {
			p.HTTPGet.Scheme = corev1.URISchemeHTTP
		}
	}
}

func fieldEnv(name, path string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
}

func requests(cpu, mem string) corev1.ResourceList {
	return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}
}

func doubled(q string) string {
	v := resource.MustParse(q)
	v.Add(v)
	return v.String()
}

func configMapVolume(name, cm string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: cm}, DefaultMode: ptr.To[int32](420)}}}
}

func replicaSetSpec(s *corev1.PodSpec, ns string, ow *diverseOwner) {
	s.ServiceAccountName, s.DeprecatedServiceAccount = ow.workload, ow.workload
	s.SecurityContext = &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](1000), RunAsGroup: ptr.To[int64](3000),
		FSGroup: ptr.To[int64](2000), RunAsNonRoot: ptr.To(true), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
	s.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "kubernetes.io/hostname",
		WhenUnsatisfiable: corev1.ScheduleAnyway, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/instance": ow.workload}}}}
	restricted := &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
		Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
	app := corev1.Container{
		Name: "app", Image: ow.app.image,
		Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}, {Name: "metrics", ContainerPort: 9090}},
		Env: []corev1.EnvVar{
			{Name: "LOG_LEVEL", Value: ow.logLevel},
			{Name: "APP_ENV", Value: "production"},
			{Name: "SERVICE_ENDPOINT", Value: "http://" + ow.workload + "." + ns + ".svc.cluster.local:8080"},
			{Name: "UPSTREAM_ENDPOINT", Value: "http://" + ow.peer + "." + ns + ".svc:8080/api/v1"},
			{Name: "SESSION_KEY_ID", Value: ow.secrets[0]},
			{Name: "FEATURE_SET", Value: ow.secrets[1]},
			fieldEnv("POD_NAME", "metadata.name"),
			fieldEnv("POD_NAMESPACE", "metadata.namespace"),
			fieldEnv("POD_IP", "status.podIP"),
			fieldEnv("NODE_NAME", "spec.nodeName"),
			{Name: "DB_PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: ow.workload + "-db"}, Key: "password"}}},
			{Name: "CACHE_SIZE", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: ow.workload + "-config"}, Key: "cache-size"}}},
		},
		Resources: corev1.ResourceRequirements{Requests: requests(ow.cpu, ow.mem),
			Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(doubled(ow.mem))}},
		LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}},
			InitialDelaySeconds: 10},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromString("http")}},
			PeriodSeconds: 5, FailureThreshold: 2},
		VolumeMounts: []corev1.VolumeMount{
			{Name: "config", ReadOnly: true, MountPath: "/etc/" + ow.app.name},
			{Name: "tls", ReadOnly: true, MountPath: "/etc/tls"},
			{Name: "tmp", MountPath: "/tmp"},
		},
		SecurityContext: restricted,
	}
	s.Containers = []corev1.Container{app}
	s.Volumes = []corev1.Volume{
		configMapVolume("config", ow.workload+"-config"),
		{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: ow.workload + "-tls", DefaultMode: ptr.To[int32](420)}}},
		{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	}
	if ow.sidecar {
		s.Containers = append(s.Containers, corev1.Container{
			Name: "metrics", Image: "quay.io/prometheus/statsd-exporter:v0.28.0",
			Args:  []string{"--statsd.listen-udp=:9125", "--web.listen-address=:9102", "--statsd.mapping-config=/etc/statsd/mapping.yaml"},
			Ports: []corev1.ContainerPort{{Name: "statsd", ContainerPort: 9125}, {Name: "exporter", ContainerPort: 9102}},
			Resources: corev1.ResourceRequirements{Requests: requests("10m", "32Mi"),
				Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")}},
			ReadinessProbe:  &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(9102)}}},
			VolumeMounts:    []corev1.VolumeMount{{Name: "statsd-mapping", ReadOnly: true, MountPath: "/etc/statsd"}},
			SecurityContext: restricted,
		})
		s.Volumes = append(s.Volumes, configMapVolume("statsd-mapping", "statsd-mapping"))
	}
	if ow.init {
		s.InitContainers = []corev1.Container{{
			Name: "wait-for-db", Image: "busybox:1.37",
			Command:   []string{"sh", "-c", "until nc -z " + ow.workload + "-db 5432; do sleep 2; done"},
			Resources: corev1.ResourceRequirements{Requests: requests("10m", "16Mi"), Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("16Mi")}},
		}}
	}
}

func statefulSetSpec(s *corev1.PodSpec, pod string, ow *diverseOwner) {
	s.Hostname, s.Subdomain = pod, ow.name
	s.ServiceAccountName, s.DeprecatedServiceAccount = ow.name, ow.name
	s.SecurityContext = &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](999), RunAsGroup: ptr.To[int64](999), FSGroup: ptr.To[int64](999)}
	dataDir := "/var/lib/" + ow.app.name
	s.Containers = []corev1.Container{{
		Name: ow.app.name, Image: ow.app.image,
		Ports: []corev1.ContainerPort{{Name: ow.app.portName, ContainerPort: ow.app.port}},
		Env: []corev1.EnvVar{
			{Name: "DATA_DIR", Value: dataDir + "/data"},
			{Name: "CLUSTER_NAME", Value: ow.name},
			{Name: "HEAP_OPTS", Value: "-Xms" + ow.mem + " -Xmx" + ow.mem},
			fieldEnv("POD_NAME", "metadata.name"),
			{Name: "PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: ow.name + "-auth"}, Key: "password"}}},
		},
		Resources: corev1.ResourceRequirements{Requests: requests(ow.cpu, doubled(ow.mem)),
			Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(doubled(doubled(ow.mem)))}},
		LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString(ow.app.portName)}},
			InitialDelaySeconds: 30},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{
			Command: []string{"sh", "-c", "exec probe --port " + strconv.Itoa(int(ow.app.port)) + " --timeout 2"}}}, TimeoutSeconds: 3},
		VolumeMounts: []corev1.VolumeMount{
			{Name: "data", MountPath: dataDir},
			{Name: "config", ReadOnly: true, MountPath: "/etc/" + ow.app.name},
		},
	}}
	s.Volumes = []corev1.Volume{
		{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data-" + pod}}},
		configMapVolume("config", ow.name+"-config"),
	}
}

func daemonSetSpec(s *corev1.PodSpec, ow *diverseOwner) {
	s.HostNetwork, s.HostPID = true, true
	s.DNSPolicy = corev1.DNSClusterFirstWithHostNet
	s.PriorityClassName, s.Priority = "system-node-critical", ptr.To[int32](2000001000)
	s.ServiceAccountName, s.DeprecatedServiceAccount = ow.app.name, ow.app.name
	s.SecurityContext = &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](65534), RunAsGroup: ptr.To[int64](65534), RunAsNonRoot: ptr.To(true)}
	s.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{
			Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{s.NodeName}}}}}}}}
	s.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	for _, t := range []struct {
		key    string
		effect corev1.TaintEffect
	}{
		{"node.kubernetes.io/not-ready", corev1.TaintEffectNoExecute}, {"node.kubernetes.io/unreachable", corev1.TaintEffectNoExecute},
		{"node.kubernetes.io/disk-pressure", corev1.TaintEffectNoSchedule}, {"node.kubernetes.io/memory-pressure", corev1.TaintEffectNoSchedule},
		{"node.kubernetes.io/pid-pressure", corev1.TaintEffectNoSchedule}, {"node.kubernetes.io/unschedulable", corev1.TaintEffectNoSchedule},
		{"node.kubernetes.io/network-unavailable", corev1.TaintEffectNoSchedule},
	} {
		s.Tolerations = append(s.Tolerations, corev1.Toleration{Key: t.key, Operator: corev1.TolerationOpExists, Effect: t.effect})
	}
	s.Containers = []corev1.Container{{
		Name: ow.app.name, Image: ow.app.image,
		Args:  []string{"--path.procfs=/host/proc", "--path.sysfs=/host/sys", "--path.rootfs=/host/root", "--web.listen-address=:" + strconv.Itoa(int(ow.app.port))},
		Ports: []corev1.ContainerPort{{Name: ow.app.portName, ContainerPort: ow.app.port, HostPort: ow.app.port}},
		Env: []corev1.EnvVar{
			fieldEnv("NODE_NAME", "spec.nodeName"),
			fieldEnv("HOST_IP", "status.hostIP"),
			{Name: "TEST_ENV", Value: ow.secrets[0][:16]},
		},
		Resources: corev1.ResourceRequirements{Requests: requests("50m", "64Mi"),
			Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("180Mi")}},
		LivenessProbe:  &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(ow.app.port)}}},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(ow.app.port)}}},
		VolumeMounts: []corev1.VolumeMount{
			{Name: "proc", ReadOnly: true, MountPath: "/host/proc"},
			{Name: "sys", ReadOnly: true, MountPath: "/host/sys"},
			{Name: "root", ReadOnly: true, MountPath: "/host/root", MountPropagation: ptr.To(corev1.MountPropagationHostToContainer)},
		},
		SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true)},
	}}
	for _, v := range []struct{ name, path string }{{"proc", "/proc"}, {"sys", "/sys"}, {"root", "/"}} {
		s.Volumes = append(s.Volumes, corev1.Volume{Name: v.name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{
			Path: v.path, Type: ptr.To(corev1.HostPathUnset)}}})
	}
}

func jobSpec(s *corev1.PodSpec, ow *diverseOwner) {
	s.RestartPolicy = corev1.RestartPolicyOnFailure
	if ow.indexed {
		s.RestartPolicy = corev1.RestartPolicyNever
	}
	s.ServiceAccountName, s.DeprecatedServiceAccount = ow.app.name, ow.app.name
	c := corev1.Container{
		Name: ow.app.name, Image: ow.app.image,
		Command: []string{"/bin/sh", "-c"},
		Args:    []string{"exec " + ow.app.name + " run --date=" + ow.created.Format("2006-01-02") + " --batch-size=500 --output=/work"},
		Env: []corev1.EnvVar{
			{Name: "RUN_ID", Value: ow.secrets[0][:32]},
			{Name: "LOG_LEVEL", Value: ow.logLevel},
			fieldEnv("POD_NAME", "metadata.name"),
			{Name: "DATABASE_URL", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: ow.app.name + "-db"}, Key: "url"}}},
		},
		Resources:    corev1.ResourceRequirements{Requests: requests(ow.cpu, ow.mem), Limits: requests(ow.cpu, ow.mem)},
		VolumeMounts: []corev1.VolumeMount{{Name: "work", MountPath: "/work"}},
	}
	if ow.indexed {
		c.Env = append(c.Env, fieldEnv("JOB_COMPLETION_INDEX", "metadata.labels['batch.kubernetes.io/job-completion-index']"))
	}
	s.Containers = []corev1.Container{c}
	s.Volumes = []corev1.Volume{{Name: "work", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
}

// statusImage is the image as a container runtime reports it: fully qualified.
func statusImage(image string) (name, repo string) {
	name = image
	if i := strings.IndexByte(image, '/'); i < 0 {
		name = "docker.io/library/" + image
	} else if !strings.ContainsAny(image[:i], ".:") {
		name = "docker.io/" + image
	}
	repo = name
	if i := strings.LastIndexByte(name, ':'); i > strings.LastIndexByte(name, '/') {
		repo = name[:i]
	}
	return name, repo
}

func diverseStatus(rng *rand.Rand, p *corev1.Pod, ow *diverseOwner, created time.Time, hostIP, podIP string) corev1.PodStatus {
	at := func(s int) metav1.Time { return metav1.NewTime(created.Add(time.Duration(s) * time.Second)) }
	gen := p.Generation
	st := corev1.PodStatus{
		ObservedGeneration: gen,
		Phase:              corev1.PodRunning,
		HostIP:             hostIP, HostIPs: []corev1.HostIP{{IP: hostIP}},
		PodIP: podIP, PodIPs: []corev1.PodIP{{IP: podIP}},
		StartTime: ptr.To(at(1)),
		QOSClass:  corev1.PodQOSBurstable,
	}
	if ow.kind == ownerJob {
		st.QOSClass = corev1.PodQOSGuaranteed
	}
	ready := 5 + rng.IntN(40)
	cond := func(t corev1.PodConditionType, ok bool, s int, reason string) corev1.PodCondition {
		c := corev1.PodCondition{Type: t, ObservedGeneration: gen, Status: corev1.ConditionTrue, LastTransitionTime: at(s), Reason: reason}
		if !ok {
			c.Status = corev1.ConditionFalse
		}
		return c
	}
	done := ow.kind == ownerJob && ow.succeeded
	if done {
		st.Phase = corev1.PodSucceeded
		st.Conditions = []corev1.PodCondition{
			cond(corev1.PodReadyToStartContainers, false, ready+60, ""),
			cond(corev1.PodInitialized, true, 1, "PodCompleted"),
			cond(corev1.PodReady, false, ready+60, "PodCompleted"),
			cond(corev1.ContainersReady, false, ready+60, "PodCompleted"),
			cond(corev1.PodScheduled, true, 0, ""),
		}
	} else {
		st.Conditions = []corev1.PodCondition{
			cond(corev1.PodReadyToStartContainers, true, 3, ""),
			cond(corev1.PodInitialized, true, 2+len(p.Spec.InitContainers)*3, ""),
			cond(corev1.PodReady, true, ready, ""),
			cond(corev1.ContainersReady, true, ready, ""),
			cond(corev1.PodScheduled, true, 0, ""),
		}
	}
	var user *corev1.ContainerUser
	if sc := p.Spec.SecurityContext; sc.RunAsUser != nil {
		groups := []int64{*sc.RunAsGroup}
		if sc.FSGroup != nil && *sc.FSGroup != *sc.RunAsGroup {
			groups = append(groups, *sc.FSGroup)
		}
		user = &corev1.ContainerUser{Linux: &corev1.LinuxContainerUser{UID: *sc.RunAsUser, GID: *sc.RunAsGroup, SupplementalGroups: groups}}
	} else {
		user = &corev1.ContainerUser{Linux: &corev1.LinuxContainerUser{UID: 0, GID: 0, SupplementalGroups: []int64{0, 1, 2, 3, 4, 6, 10, 11, 20, 26, 27}}}
	}
	status := func(c *corev1.Container, init bool) corev1.ContainerStatus {
		image, repo := statusImage(c.Image)
		cs := corev1.ContainerStatus{
			Name: c.Name, Image: image, ImageID: repo + "@sha256:" + sha(image),
			ContainerID: "containerd://" + hexString(rng, 64),
			Resources:   c.Resources.DeepCopy(), AllocatedResources: c.Resources.Requests.DeepCopy(),
			User: user,
		}
		for _, m := range c.VolumeMounts {
			vs := corev1.VolumeMountStatus{Name: m.Name, MountPath: m.MountPath, ReadOnly: m.ReadOnly}
			if m.ReadOnly {
				vs.RecursiveReadOnly = ptr.To(corev1.RecursiveReadOnlyDisabled)
			}
			cs.VolumeMounts = append(cs.VolumeMounts, vs)
		}
		switch {
		case init || done:
			start := 2
			if !init {
				start = 4 + 3*len(p.Spec.InitContainers)
			}
			cs.State.Terminated = &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed",
				StartedAt: at(start), FinishedAt: at(start + 2 + rng.IntN(50)), ContainerID: cs.ContainerID}
			cs.Ready, cs.Started = init, ptr.To(false)
		default:
			cs.Ready, cs.Started = true, ptr.To(true)
			start := 4 + 3*len(p.Spec.InitContainers)
			if rng.IntN(8) == 0 {
				cs.RestartCount = int32(1 + rng.IntN(4))
				reason, code := "Error", int32(1)
				if rng.IntN(2) == 0 {
					reason, code = "OOMKilled", 137
				}
				cs.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason,
					StartedAt: at(start), FinishedAt: at(start + 600 + rng.IntN(86400)), ContainerID: "containerd://" + hexString(rng, 64)}
				start = int(cs.LastTerminationState.Terminated.FinishedAt.Sub(created)/time.Second) + 1
			}
			cs.State.Running = &corev1.ContainerStateRunning{StartedAt: at(start)}
		}
		return cs
	}
	for i := range p.Spec.InitContainers {
		st.InitContainerStatuses = append(st.InitContainerStatuses, status(&p.Spec.InitContainers[i], true))
	}
	for i := range p.Spec.Containers {
		st.ContainerStatuses = append(st.ContainerStatuses, status(&p.Spec.Containers[i], false))
	}
	slices.SortFunc(st.ContainerStatuses, func(a, b corev1.ContainerStatus) int { return strings.Compare(a.Name, b.Name) })
	return st
}

// DiverseConfigMap is the k-th ConfigMap of the diverse workload in ns: a Helm release's
// settings, with data of its own (200 B to 2 KB) under one of two sets of keys.
func DiverseConfigMap(ns string, k int) *corev1.ConfigMap {
	rng := rngFor("configmap", ns, strconv.Itoa(k))
	app := pick(rng, replicaSetApps)
	release := app + "-" + strconv.Itoa(k/4)
	version := fmt.Sprintf("1.%d.%d", rng.IntN(20), rng.IntN(10))
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("%s-%d-config", app, k), Namespace: ns, UID: randUID(rng),
			CreationTimestamp: metav1.NewTime(diverseBase.Add(-time.Duration(rng.IntN(30*24*3600)) * time.Second)),
			Labels: map[string]string{
				"app.kubernetes.io/name": app, "app.kubernetes.io/instance": release, "app.kubernetes.io/version": version,
				"app.kubernetes.io/managed-by": "Helm", "helm.sh/chart": app + "-" + version,
			},
			Annotations: map[string]string{"meta.helm.sh/release-name": release, "meta.helm.sh/release-namespace": ns},
		},
	}
	var b strings.Builder
	if k%2 == 0 {
		fmt.Fprintf(&b, "server:\n  port: 8080\n  shutdownTimeout: %ds\ndatabase:\n  host: %s-db-%d.%s.svc.cluster.local\n  name: %s_%d\n  pool: {min: %d, max: %d}\ncache:\n  ttl: %ds\nfeatures:\n",
			5+rng.IntN(30), app, k, ns, app, k, 1+rng.IntN(4), 8+rng.IntN(56), 30+rng.IntN(3600))
		for range 2 + rng.IntN(24) {
			fmt.Fprintf(&b, "  - name: %s\n    enabled: %t\n    rollout: %d%%\n", randString(rng, lower, 6+rng.IntN(12)), rng.IntN(2) == 0, rng.IntN(101))
		}
		cm.Data = map[string]string{"application.yaml": b.String(), "LOG_LEVEL": pick(rng, logLevels), "cache-size": strconv.Itoa(64 << rng.IntN(6))}
	} else {
		fmt.Fprintf(&b, "{\n  \"service\": %q,\n  \"upstreams\": [", release)
		for i := range 1 + rng.IntN(12) {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%q", fmt.Sprintf("http://%s-%d.%s.svc:8080", pick(rng, replicaSetApps), rng.IntN(200), ns))
		}
		fmt.Fprintf(&b, "],\n  \"timeoutMs\": %d,\n  \"retries\": %d,\n  \"token\": %q\n}\n", 100*(1+rng.IntN(50)), rng.IntN(5), randString(rng, alnum, 40))
		cm.Data = map[string]string{"settings.json": b.String(), "ENDPOINT": fmt.Sprintf("https://%s.%s.example.com", release, ns)}
	}
	return cm
}

// diverseCluster writes the diverse workload into c. The first Pod of each shape (owner kind
// and the fields that name managedFields keys) and the first ConfigMap of each set of keys are
// created through the API, and the Pod's status written through it as the kubelet; both must
// come back as generated, which checks the generator against the API server's defaulting.
// Every object then takes its template's managedFields, with the template's own values (owner
// UID, service-account volume name, IPs) replaced by its own, and is written into etcd.
func (l *Loader) diverseCluster(ctx context.Context, c *Cluster, spec BulkSpec, codec runtime.Encoder) error {
	for i := range spec.Namespaces {
		if _, err := l.createNamespace(c.Name, nsName(i)).do(ctx); err != nil {
			return fmt.Errorf("cluster %q: bulk: namespace: %w", c.Name, err)
		}
	}
	podT := map[string]diversePod{}
	served := map[string]*corev1.Pod{}
	cmT := map[string]*corev1.ConfigMap{}
	return c.etcdBatches(ctx, func(put func(key string, obj runtime.Object) error) error {
		for i := range spec.Namespaces {
			ns := nsName(i)
			for _, d := range diversePods(c.Name, ns, spec.PodsPerNamespace, spec.Nodes) {
				if _, ok := podT[d.shape]; !ok {
					s, err := l.createDiversePod(ctx, c, d.pod)
					if err != nil {
						return err
					}
					podT[d.shape], served[d.shape] = d, s
				}
				t, s := podT[d.shape], served[d.shape]
				p := d.pod.DeepCopy()
				p.ManagedFields = rewriteManagedFields(s.ManagedFields, t.tokens, d.tokens)
				if err := put("/registry/pods/"+ns+"/"+p.Name, p); err != nil {
					return err
				}
			}
			for k := range spec.ConfigMapsPerNamespace {
				cm := DiverseConfigMap(ns, k)
				keys := strings.Join(slices.Sorted(maps.Keys(cm.Data)), ",")
				if _, ok := cmT[keys]; !ok {
					s, err := l.createDiverseConfigMap(ctx, c, cm)
					if err != nil {
						return err
					}
					cmT[keys] = s
				}
				cm.ManagedFields = rewriteManagedFields(cmT[keys].ManagedFields, nil, nil)
				if err := put("/registry/configmaps/"+ns+"/"+cm.Name, cm); err != nil {
					return err
				}
			}
		}
		return nil
	}, codec)
}

// createDiversePod creates want through the API as the kube-controller-manager, writes its
// status as the kubelet, and returns what the API server then serves. It fails if the served
// spec or status differ from want's.
func (l *Loader) createDiversePod(ctx context.Context, c *Cluster, want *corev1.Pod) (*corev1.Pod, error) {
	pods := l.typed[c.Name].CoreV1().Pods(want.Namespace)
	in := want.DeepCopy()
	in.UID, in.Status, in.CreationTimestamp, in.Generation = "", corev1.PodStatus{}, metav1.Time{}, 0
	got, err := pods.Create(ctx, in, metav1.CreateOptions{FieldManager: "kube-controller-manager"})
	if err != nil {
		return nil, fmt.Errorf("cluster %q: bulk: template pod %s/%s: %w", c.Name, want.Namespace, want.Name, err)
	}
	if !apiequality.Semantic.DeepEqual(got.Spec, want.Spec) || got.Generation != want.Generation {
		return nil, fmt.Errorf("cluster %q: bulk: template pod %s/%s: served spec differs from the generated one (generation %d, want %d): %s",
			c.Name, want.Namespace, want.Name, got.Generation, want.Generation, diff.Diff(want.Spec, got.Spec))
	}
	got.Status = want.Status
	if got, err = pods.UpdateStatus(ctx, got, metav1.UpdateOptions{FieldManager: "kubelet"}); err != nil {
		return nil, fmt.Errorf("cluster %q: bulk: template pod %s/%s status: %w", c.Name, want.Namespace, want.Name, err)
	}
	if !apiequality.Semantic.DeepEqual(got.Status, want.Status) {
		return nil, fmt.Errorf("cluster %q: bulk: template pod %s/%s: served status differs from the generated one: %s",
			c.Name, want.Namespace, want.Name, diff.Diff(want.Status, got.Status))
	}
	return got, nil
}

func (l *Loader) createDiverseConfigMap(ctx context.Context, c *Cluster, want *corev1.ConfigMap) (*corev1.ConfigMap, error) {
	in := want.DeepCopy()
	in.UID, in.CreationTimestamp = "", metav1.Time{}
	got, err := l.typed[c.Name].CoreV1().ConfigMaps(want.Namespace).Create(ctx, in, metav1.CreateOptions{FieldManager: "helm"})
	if err != nil {
		return nil, fmt.Errorf("cluster %q: bulk: template configmap %s/%s: %w", c.Name, want.Namespace, want.Name, err)
	}
	if !apiequality.Semantic.DeepEqual(got.Data, want.Data) || !apiequality.Semantic.DeepEqual(got.Labels, want.Labels) {
		return nil, fmt.Errorf("cluster %q: bulk: template configmap %s/%s differs from the generated one", c.Name, want.Namespace, want.Name)
	}
	return got, nil
}

// rewriteManagedFields copies mf, replacing each quoted from[i] in its field sets by to[i]. The
// values are UIDs, volume names and IPs, which appear in field sets only as whole keys.
func rewriteManagedFields(mf []metav1.ManagedFieldsEntry, from, to []string) []metav1.ManagedFieldsEntry {
	out := make([]metav1.ManagedFieldsEntry, len(mf))
	for i := range mf {
		mf[i].DeepCopyInto(&out[i])
		if out[i].FieldsV1 == nil {
			continue
		}
		raw := out[i].FieldsV1.GetRawBytes()
		for k := range from {
			if from[k] != to[k] {
				raw = bytes.ReplaceAll(raw, []byte(`\"`+from[k]+`\"`), []byte(`\"`+to[k]+`\"`))
			}
		}
		out[i].FieldsV1.SetRawBytes(raw)
	}
	return out
}

// etcdBatches runs produce, which hands objects to put, and writes them into c's etcd under
// their keys in the codec's encoding, with fresh resource versions, bulkTxnOps per
// transaction, from 4 writers. It returns the first error of either side.
func (c *Cluster) etcdBatches(ctx context.Context, produce func(put func(key string, obj runtime.Object) error) error, codec runtime.Encoder) error {
	batches := make(chan []etcdPut, 8)
	errs := make(chan error, 4)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for b := range batches {
				if err := c.etcdTxnPut(ctx, b); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	var b []etcdPut
	send := func() error {
		select {
		case batches <- b:
			b = nil
			return nil
		case err := <-errs:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	put := func(key string, obj runtime.Object) error {
		data, err := runtime.Encode(codec, obj)
		if err != nil {
			return fmt.Errorf("cluster %q: bulk: encode %s: %w", c.Name, key, err)
		}
		b = append(b, etcdPut{key, string(data)})
		if len(b) == bulkTxnOps {
			return send()
		}
		return nil
	}
	perr := produce(put)
	if perr == nil && len(b) > 0 {
		perr = send()
	}
	close(batches)
	wg.Wait()
	close(errs)
	if perr != nil {
		return perr
	}
	for err := range errs {
		return err
	}
	return nil
}

const (
	nameChars = "bcdfghjklmnpqrstvwxz2456789"
	alnum     = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	lower     = "abcdefghijklmnopqrstuvwxyz"
)

// rngFor is a generator seeded by parts, so that equal parts give equal sequences.
func rngFor(parts ...string) *rand.Rand {
	h := fnv.New64a()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	s := h.Sum64()
	return rand.New(rand.NewPCG(s, s^0x9e3779b97f4a7c15))
}

func pick[T any](rng *rand.Rand, xs []T) T { return xs[rng.IntN(len(xs))] }

func randString(rng *rand.Rand, alphabet string, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[rng.IntN(len(alphabet))]
	}
	return string(b)
}

func hexString(rng *rand.Rand, n int) string {
	b := make([]byte, (n+1)/2)
	for i := range b {
		b[i] = byte(rng.UintN(256))
	}
	return hex.EncodeToString(b)[:n]
}

func randUID(rng *rand.Rand) types.UID {
	h := hexString(rng, 32)
	return types.UID(h[:8] + "-" + h[8:12] + "-4" + h[13:16] + "-a" + h[17:20] + "-" + h[20:])
}

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
