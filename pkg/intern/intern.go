package intern

import (
	"encoding/binary"
	"reflect"
	"slices"
	"sync"
	"unique"

	lru "github.com/hashicorp/golang-lru/v2"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Options bound a Table.
type Options struct {
	// MaxEntries bounds each canonical-part table (labels, annotations, resource lists,
	// tolerations). Least recently used entries are forgotten; objects that already share
	// them keep them. Default 16384.
	MaxEntries int
	// MaxValueBytes: maps whose keys and values add up to more are not shared (a large unique
	// annotation costs more as a table entry than it saves). Default 4096.
	MaxValueBytes int
}

// Table holds the canonical parts. It is safe for concurrent use.
type Table struct {
	maxBytes    int
	strMaps     *lru.Cache[string, map[string]string]
	resources   *lru.Cache[string, corev1.ResourceList]
	tolerations *lru.Cache[string, []corev1.Toleration]
}

// New returns a Table with opts applied over the defaults.
func New(opts Options) *Table {
	if opts.MaxEntries <= 0 {
		opts.MaxEntries = 16384
	}
	if opts.MaxValueBytes <= 0 {
		opts.MaxValueBytes = 4096
	}
	t := &Table{maxBytes: opts.MaxValueBytes}
	// lru.New fails only for a non-positive size.
	t.strMaps, _ = lru.New[string, map[string]string](opts.MaxEntries)
	t.resources, _ = lru.New[string, corev1.ResourceList](opts.MaxEntries)
	t.tolerations, _ = lru.New[string, []corev1.Toleration](opts.MaxEntries)
	return t
}

var shared = sync.OnceValue(func() *Table { return New(Options{}) })

// Shared is the process-wide Table, so objects from every cluster and registry share parts.
func Shared() *Table { return shared() }

// Object rewrites obj in place so its repeated parts point at canonical copies. obj must be
// freshly decoded and not yet visible to anyone else (an informer transform satisfies this).
// The result is semantically equal to the input. Types it does not know keep their content
// and only get their ObjectMeta shared.
func (t *Table) Object(obj any) {
	switch o := obj.(type) {
	case *corev1.Pod:
		t.meta(&o.ObjectMeta)
		t.podSpec(&o.Spec)
		o.Status.HostIP, o.Status.QOSClass = Str(o.Status.HostIP), corev1.PodQOSClass(Str(string(o.Status.QOSClass)))
		o.Status.Phase = corev1.PodPhase(Str(string(o.Status.Phase)))
		for i := range o.Status.Conditions {
			c := &o.Status.Conditions[i]
			c.Type, c.Status = corev1.PodConditionType(Str(string(c.Type))), corev1.ConditionStatus(Str(string(c.Status)))
		}
		for _, cs := range [][]corev1.ContainerStatus{o.Status.ContainerStatuses, o.Status.InitContainerStatuses} {
			for i := range cs {
				cs[i].Name, cs[i].Image, cs[i].ImageID = Str(cs[i].Name), Str(cs[i].Image), Str(cs[i].ImageID)
			}
		}
	case *corev1.Event:
		t.event(o)
	case *appsv1.Deployment:
		t.workload(&o.ObjectMeta, &o.Spec.Template)
	case *appsv1.ReplicaSet:
		t.workload(&o.ObjectMeta, &o.Spec.Template)
	case *appsv1.StatefulSet:
		t.workload(&o.ObjectMeta, &o.Spec.Template)
	case *appsv1.DaemonSet:
		t.workload(&o.ObjectMeta, &o.Spec.Template)
	case *batchv1.Job:
		t.workload(&o.ObjectMeta, &o.Spec.Template)
	case *batchv1.CronJob:
		t.meta(&o.ObjectMeta)
		t.workload(&o.Spec.JobTemplate.ObjectMeta, &o.Spec.JobTemplate.Spec.Template)
	case metav1.ObjectMetaAccessor:
		if m, ok := o.GetObjectMeta().(*metav1.ObjectMeta); ok {
			t.meta(m)
		}
	}
}

// event shares an Event's repeated strings: what it is about, why, and who reported it. An
// event's message is its own unless short: most repeat a template with names in it.
func (t *Table) event(e *corev1.Event) {
	t.meta(&e.ObjectMeta)
	o := &e.InvolvedObject
	o.Kind, o.Namespace, o.APIVersion, o.FieldPath = Str(o.Kind), Str(o.Namespace), Str(o.APIVersion), Str(o.FieldPath)
	e.Reason, e.Type, e.Action = Str(e.Reason), Str(e.Type), Str(e.Action)
	e.Source.Component, e.Source.Host = Str(e.Source.Component), Str(e.Source.Host)
	e.ReportingController, e.ReportingInstance = Str(e.ReportingController), Str(e.ReportingInstance)
	if len(e.Message) <= 128 {
		e.Message = Str(e.Message)
	}
	if r := e.Related; r != nil {
		r.Kind, r.Namespace, r.APIVersion = Str(r.Kind), Str(r.Namespace), Str(r.APIVersion)
	}
}

// workload shares the parts of an object that carries a Pod template.
func (t *Table) workload(m *metav1.ObjectMeta, p *corev1.PodTemplateSpec) {
	t.meta(m)
	t.meta(&p.ObjectMeta)
	t.podSpec(&p.Spec)
}

// Str returns the canonical copy of s.
func Str(s string) string {
	if s == "" {
		return ""
	}
	return unique.Make(s).Value()
}

func (t *Table) meta(m *metav1.ObjectMeta) {
	m.Namespace = Str(m.Namespace)
	m.GenerateName = Str(m.GenerateName)
	m.Labels = t.StringMap(m.Labels)
	m.Annotations = t.StringMap(m.Annotations)
	for i := range m.OwnerReferences {
		r := &m.OwnerReferences[i]
		r.APIVersion, r.Kind = Str(r.APIVersion), Str(r.Kind)
	}
	for i, f := range m.Finalizers {
		m.Finalizers[i] = Str(f)
	}
}

var emptyPodSecurity, emptySecurity = &corev1.PodSecurityContext{}, &corev1.SecurityContext{}

func (t *Table) podSpec(s *corev1.PodSpec) {
	s.NodeName, s.SchedulerName = Str(s.NodeName), Str(s.SchedulerName)
	s.ServiceAccountName, s.DeprecatedServiceAccount = Str(s.ServiceAccountName), Str(s.DeprecatedServiceAccount)
	s.RestartPolicy, s.DNSPolicy = corev1.RestartPolicy(Str(string(s.RestartPolicy))), corev1.DNSPolicy(Str(string(s.DNSPolicy)))
	s.PriorityClassName = Str(s.PriorityClassName)
	if s.PreemptionPolicy != nil {
		p := corev1.PreemptionPolicy(Str(string(*s.PreemptionPolicy)))
		s.PreemptionPolicy = &p
	}
	s.NodeSelector = t.StringMap(s.NodeSelector)
	if s.SecurityContext != nil && isEmpty(s.SecurityContext) {
		s.SecurityContext = emptyPodSecurity
	}
	s.Tolerations = t.Tolerations(s.Tolerations)
	s.Containers = t.containers(s.Containers)
	s.InitContainers = t.containers(s.InitContainers)
}

func (t *Table) containers(cs []corev1.Container) []corev1.Container {
	cs = clip(cs)
	for i := range cs {
		c := &cs[i]
		c.Name, c.Image = Str(c.Name), Str(c.Image)
		c.ImagePullPolicy = corev1.PullPolicy(Str(string(c.ImagePullPolicy)))
		c.TerminationMessagePath = Str(c.TerminationMessagePath)
		c.TerminationMessagePolicy = corev1.TerminationMessagePolicy(Str(string(c.TerminationMessagePolicy)))
		c.WorkingDir = Str(c.WorkingDir)
		for j, s := range c.Command {
			c.Command[j] = Str(s)
		}
		c.Env = clip(c.Env)
		for j := range c.Env {
			c.Env[j].Name = Str(c.Env[j].Name)
		}
		c.Ports = clip(c.Ports)
		for j := range c.Ports {
			p := &c.Ports[j]
			p.Name, p.Protocol = Str(p.Name), corev1.Protocol(Str(string(p.Protocol)))
		}
		c.VolumeMounts = clip(c.VolumeMounts)
		for j := range c.VolumeMounts {
			m := &c.VolumeMounts[j]
			m.Name, m.MountPath = Str(m.Name), Str(m.MountPath)
		}
		c.Resources.Requests = t.Resources(c.Resources.Requests)
		c.Resources.Limits = t.Resources(c.Resources.Limits)
		if c.SecurityContext != nil && isEmpty(c.SecurityContext) {
			c.SecurityContext = emptySecurity
		}
	}
	return cs
}

// clip drops spare capacity that decoding by append leaves behind (a 3-element slice of
// 408-byte Containers otherwise holds room for 4).
func clip[T any](s []T) []T {
	if cap(s) == len(s) {
		return s
	}
	if len(s) == 0 {
		return nil
	}
	return slices.Clone(s)
}

// isEmpty reports whether *p is the zero value. Nil and empty slices differ, so a decoded
// "[]" is never replaced by nil. (reflect's IsZero compares in place; DeepEqual against a zero
// value would copy both into interfaces, once per container of every Pod.)
func isEmpty[T any](p *T) bool {
	return reflect.ValueOf(p).Elem().IsZero()
}

// appendStr appends s with a length prefix, so concatenated keys are unambiguous.
func appendStr(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// StringMap returns the canonical map equal to m. Nil and empty maps come back unchanged, and
// so do maps larger than MaxValueBytes.
func (t *Table) StringMap(m map[string]string) map[string]string {
	if len(m) == 0 {
		return m
	}
	// Keys and the lookup key are built in stack buffers when they fit (most label sets do);
	// only the key handed to the table is allocated.
	var keysBuf [16]string
	keys := keysBuf[:0]
	size := 0
	for k, v := range m {
		keys = append(keys, k)
		size += len(k) + len(v)
	}
	if size > t.maxBytes {
		return m
	}
	slices.Sort(keys)
	var keyBuf [512]byte
	b := keyBuf[:0]
	for _, k := range keys {
		b = appendStr(appendStr(b, k), m[k])
	}
	key := string(b)
	if c, ok := t.strMaps.Get(key); ok {
		return c
	}
	// A new map, never m rewritten: m may itself be a canonical map shared by other objects
	// and since evicted from the table. Keys and values are interned too: a canonical map
	// outlives its LRU entry.
	c := make(map[string]string, len(m))
	for _, k := range keys {
		c[Str(k)] = Str(m[k])
	}
	t.strMaps.Add(key, c)
	return c
}

// Resources returns the canonical ResourceList equal to l (same names, same quantities as
// written by Quantity.String).
func (t *Table) Resources(l corev1.ResourceList) corev1.ResourceList {
	if len(l) == 0 {
		return l
	}
	var namesBuf [8]corev1.ResourceName
	names := namesBuf[:0]
	for n := range l {
		names = append(names, n)
	}
	slices.Sort(names)
	var keyBuf [256]byte
	b := keyBuf[:0]
	for _, n := range names {
		q := l[n]
		// As written (a decoded quantity keeps its text when that is canonical, and String
		// then returns it without allocating), so "+1" and "1" are not taken for each other.
		b = appendStr(appendStr(b, string(n)), q.String())
	}
	key := string(b)
	if c, ok := t.resources.Get(key); ok {
		return c
	}
	t.resources.Add(key, l)
	return l
}

// Tolerations returns the canonical list equal to ts, in the same order.
func (t *Table) Tolerations(ts []corev1.Toleration) []corev1.Toleration {
	if len(ts) == 0 {
		return ts
	}
	var keyBuf [512]byte
	b := keyBuf[:0]
	for _, x := range ts {
		b = appendStr(appendStr(appendStr(appendStr(b, x.Key), string(x.Operator)), x.Value), string(x.Effect))
		if x.TolerationSeconds != nil {
			b = binary.AppendVarint(append(b, 1), *x.TolerationSeconds)
		} else {
			b = append(b, 0)
		}
	}
	key := string(b)
	if c, ok := t.tolerations.Get(key); ok {
		return c
	}
	ts = clip(ts)
	t.tolerations.Add(key, ts)
	return ts
}
