package crcache

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/clusterset"
)

// Options configures a Fleet.
type Options struct {
	// Scheme maps Go types to kinds. Default: client-go's scheme (the built-in kinds).
	Scheme *runtime.Scheme
	// SyncPoll is how often a read that waits for a cluster's resource to sync looks again.
	// Default 50ms.
	SyncPoll time.Duration
}

// Fleet is the controller-runtime side of a Registry. Its Caches share the Registry's stacks
// and its field indexes.
type Fleet struct {
	reg    *clusterset.Registry
	scheme *runtime.Scheme
	poll   time.Duration

	mu           sync.Mutex
	indexes      map[string]map[string]bool // resource → field index names added
	pending      []pendingIndex             // IndexFields of kinds no cluster has resolved yet
	adding       sync.Mutex                 // held while pending IndexFields are added: a read waits for them
	pendingTried time.Time
	kinds        sync.Map     // schema.GroupKind → target: resolved once by any cluster, it stays
	pendingN     atomic.Int32 // len(pending), read without the lock on every read
}

// pendingIndex is an IndexField waiting for its kind to resolve.
type pendingIndex struct {
	gk      schema.GroupKind
	obj     client.Object
	field   string
	extract client.IndexerFunc
}

// NewFleet returns the Fleet of reg. reg is started by its owner (Start here, or the
// daemon's): Caches read what it holds, and wait for it to sync.
func NewFleet(reg *clusterset.Registry, opts Options) (*Fleet, error) {
	if reg == nil {
		return nil, errors.New("crcache: NewFleet: the Registry is required")
	}
	if opts.Scheme == nil {
		opts.Scheme = clientgoscheme.Scheme
	}
	if opts.SyncPoll <= 0 {
		opts.SyncPoll = 50 * time.Millisecond
	}
	return &Fleet{reg: reg, scheme: opts.Scheme, poll: opts.SyncPoll, indexes: map[string]map[string]bool{}}, nil
}

// Start runs the Registry until ctx ends, for a program that has no other owner of it.
func (f *Fleet) Start(ctx context.Context) error { return f.reg.Start(ctx) }

// Cache is cluster's cache.Cache. Any number of Caches of one cluster may exist; they share
// everything.
func (f *Fleet) Cache(cluster string) *Cache {
	return &Cache{f: f, cluster: cluster, handlers: map[string][]*aggregate.Registration{}}
}

// NewCacheFunc returns cluster's Cache as cluster.Options.NewCache and manager.Options.NewCache
// take it. The rest.Config and cache.Options they pass are not used: the Registry decides what
// is cached, from which server.
func (f *Fleet) NewCacheFunc(cluster string) cache.NewCacheFunc {
	return func(*rest.Config, cache.Options) (cache.Cache, error) { return f.Cache(cluster), nil }
}

// Cache is controller-runtime's cache.Cache for one member cluster of a Fleet.
type Cache struct {
	f       *Fleet
	cluster string

	mu       sync.Mutex
	handlers map[string][]*aggregate.Registration // by resource: those this Cache's informers added
	stopped  bool                                 // Start's context ended: no handler is added
}

var _ cache.Cache = (*Cache)(nil)

// target is what a read resolves to: the resource's aggregate and this cluster's store of it.
type target struct {
	gvk        schema.GroupVersionKind
	resource   string // as the Registry names it
	agg        *aggregate.Aggregate
	plural     string
	namespaced bool
}

// kindOf is the kind of obj, or of the items of a list.
func (f *Fleet) kindOf(obj runtime.Object) (schema.GroupVersionKind, error) {
	gvk, err := apiutil.GVKForObject(obj, f.scheme)
	if err != nil {
		return gvk, err // as it is: runtime.IsNotRegisteredError asserts its type
	}
	if _, isList := obj.(client.ObjectList); isList {
		gvk.Kind = strings.TrimSuffix(gvk.Kind, "List")
	}
	return gvk, nil
}

// resolve finds the Registry's resource of gvk's group and kind, as any cluster resolved it
// (once found, it is kept: reads do not look again).
func (c *Cache) resolve(gvk schema.GroupVersionKind) (target, error) {
	gk := gvk.GroupKind()
	if v, ok := c.f.kinds.Load(gk); ok {
		t := v.(target)
		t.gvk = gvk
		return t, nil
	}
	for _, cs := range c.f.reg.Status() {
		for _, rs := range cs.Resources {
			if rs.Group != gvk.Group || rs.Kind != gvk.Kind {
				continue
			}
			agg, ok := c.f.reg.Aggregate(rs.Resource)
			if !ok {
				continue
			}
			t := target{gvk: gvk, resource: rs.Resource, agg: agg, plural: rs.Plural, namespaced: rs.Namespaced}
			c.f.kinds.Store(gk, t)
			return t, nil
		}
	}
	return target{}, fmt.Errorf("crcache: cluster %q: %w (multicache caches %s; add it to the Registry's resources)",
		c.cluster, &cache.ErrResourceNotCached{GVK: gvk}, strings.Join(c.f.reg.Resources(), ", "))
}

// notServed is the error of a resource that cluster does not serve (a CRD it does not have),
// nil while it does or may.
func (c *Cache) notServed(t target) error {
	cs, ok := c.f.reg.ClusterStatus(c.cluster)
	if !ok {
		return nil
	}
	for _, rs := range cs.Resources {
		if rs.Resource == t.resource && rs.State == clusterset.NotServed {
			return &meta.NoKindMatchError{GroupKind: t.gvk.GroupKind(), SearchedVersions: []string{t.gvk.Version}}
		}
	}
	return nil
}

// resolveWait is resolve, waiting within ctx while no cluster has resolved the Registry's
// resources yet (it is starting): only then is a kind none of them has not cached.
func (c *Cache) resolveWait(ctx context.Context, gvk schema.GroupVersionKind) (target, error) {
	for {
		t, err := c.resolve(gvk)
		var nc *cache.ErrResourceNotCached
		if err == nil || !errors.As(err, &nc) {
			return t, err
		}
		if c.f.allResolved() {
			// resolve read the status before allResolved did: a kind resolved in between
			// is found by one more look, which reads the status after it.
			return c.resolve(gvk)
		}
		select {
		case <-ctx.Done():
			return t, fmt.Errorf("crcache: cluster %q: %s: no cluster has resolved it yet: %w", c.cluster, gvk.Kind, ctx.Err())
		case <-time.After(c.f.poll):
		}
	}
}

// read resolves gvk and waits, within ctx, until cluster's store of it has synced, as
// controller-runtime's reads wait for their informer.
func (c *Cache) read(ctx context.Context, gvk schema.GroupVersionKind) (target, toolscache.Indexer, error) {
	t, err := c.resolveWait(ctx, gvk)
	if err != nil {
		return t, nil, err
	}
	gk := gvk.GroupKind()
	c.f.addPendingIndexes(&gk)
	if err := c.waitSynced(ctx, t); err != nil {
		return t, nil, err
	}
	store, ok := t.agg.Cluster(c.cluster)
	if !ok {
		return t, nil, c.gone()
	}
	return t, store, nil
}

// gone is the error of a read of a cluster that is not in the fleet (any more).
func (c *Cache) gone() error {
	return fmt.Errorf("crcache: cluster %q is not in the fleet", c.cluster)
}

// waitSynced waits until cluster's store of t holds a whole list (aggregate.HasList), the
// cluster leaves, or ctx ends. Like controller-runtime's reads, it waits for a stack's first
// sync only: a cluster that fails later (degraded, its API server down) answers its last
// state. A cluster the Registry restarted (new server or credentials) has a new stack, and
// reads wait for its first sync again. A resource the cluster does not serve is
// meta.NoKindMatchError, as controller-runtime's.
func (c *Cache) waitSynced(ctx context.Context, t target) error {
	for !t.agg.HasList(c.cluster) {
		if c.f.reg.Loaded() && !slices.Contains(c.f.reg.Clusters(), c.cluster) {
			return c.gone()
		}
		if err := c.notServed(t); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("crcache: cluster %q: %s not synced yet: %w", c.cluster, t.resource, ctx.Err())
		case <-time.After(c.f.poll):
		}
	}
	return nil
}

// Get reads the object named key into obj: a copy, with its apiVersion and kind set. An object
// the cluster does not hold is apierrors' NotFound.
func (c *Cache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	gvk, err := c.f.kindOf(obj)
	if err != nil {
		return err
	}
	t, store, err := c.read(ctx, gvk)
	if err != nil {
		return err
	}
	k := key.Name
	if key.Namespace != "" && t.namespaced {
		k = key.Namespace + "/" + key.Name // a cluster-scoped object's key has no namespace
	}
	item, exists, err := store.GetByKey(k)
	if err != nil {
		return fmt.Errorf("crcache: cluster %q: get %s %s: %w", c.cluster, t.resource, k, err)
	}
	if !exists {
		return apierrors.NewNotFound(schema.GroupResource{Group: gvk.Group, Resource: t.plural}, key.Name)
	}
	return c.copyInto(obj, item, gvk)
}

// List reads the objects that opts select into list, as controller-runtime's informer cache
// does: a namespace, a label selector, a field selector of exact matches on fields indexed
// with IndexField, and a limit (no continue).
func (c *Cache) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	lo := client.ListOptions{}
	lo.ApplyOptions(opts)
	if lo.Continue != "" {
		return errors.New("continue list option is not supported by the cache")
	}
	gvk, err := c.f.kindOf(list)
	if err != nil {
		return err
	}
	_, store, err := c.read(ctx, gvk)
	if err != nil {
		return err
	}
	var objs []any
	switch {
	case lo.FieldSelector != nil:
		objs, err = byFields(store, lo.FieldSelector.Requirements(), lo.Namespace)
	case lo.Namespace != "":
		objs, err = store.ByIndex(toolscache.NamespaceIndex, lo.Namespace)
	default:
		objs = store.List()
	}
	if err != nil {
		return err
	}
	items := make([]runtime.Object, 0, len(objs))
	for _, o := range objs {
		if lo.Limit > 0 && int64(len(items)) >= lo.Limit {
			break
		}
		m, err := meta.Accessor(o)
		if err != nil {
			return fmt.Errorf("crcache: cluster %q: %w", c.cluster, err)
		}
		if lo.LabelSelector != nil && !lo.LabelSelector.Matches(labels.Set(m.GetLabels())) {
			continue
		}
		item, err := c.newItem(list, gvk)
		if err != nil {
			return err
		}
		if err := c.copyInto(item, o, gvk); err != nil {
			return err
		}
		items = append(items, item)
	}
	if err := meta.SetList(list, items); err != nil {
		return fmt.Errorf("crcache: %w", err)
	}
	list.SetContinue("continue-not-supported")
	return nil
}

// byFields selects by a field selector of exact matches, each on a field IndexField indexed:
// the first through its index, the others by their index function.
func byFields(store toolscache.Indexer, reqs fields.Requirements, namespace string) ([]any, error) {
	if len(reqs) == 0 {
		return nil, errors.New("non-exact field matches are not supported by the cache")
	}
	for _, r := range reqs {
		if r.Operator != selection.Equals && r.Operator != selection.DoubleEquals {
			return nil, errors.New("non-exact field matches are not supported by the cache")
		}
	}
	indexers := store.GetIndexers()
	var objs []any
	for i, r := range reqs {
		name, value := fieldIndexName(r.Field), namespacedKey(namespace, r.Value)
		if i == 0 {
			var err error
			if objs, err = store.ByIndex(name, value); err != nil {
				return nil, err
			}
			continue
		}
		fn, ok := indexers[name]
		if !ok {
			return nil, fmt.Errorf("index with name %s does not exist", name)
		}
		kept := objs[:0:0]
		for _, o := range objs {
			vals, err := fn(o)
			if err != nil {
				return nil, err
			}
			if slices.Contains(vals, value) {
				kept = append(kept, o)
			}
		}
		objs = kept
	}
	return objs, nil
}

// newItem is an empty item of list's kind: unstructured for an unstructured list, metadata for
// a metadata list, the scheme's type otherwise.
func (c *Cache) newItem(list client.ObjectList, gvk schema.GroupVersionKind) (client.Object, error) {
	switch list.(type) {
	case *unstructured.UnstructuredList:
		return &unstructured.Unstructured{}, nil
	case *metav1.PartialObjectMetadataList:
		return &metav1.PartialObjectMetadata{}, nil
	}
	o, err := c.f.scheme.New(gvk)
	if err != nil {
		return nil, fmt.Errorf("crcache: %w", err)
	}
	obj, ok := o.(client.Object)
	if !ok {
		return nil, fmt.Errorf("crcache: %T is not a client.Object", o)
	}
	return obj, nil
}

// copyInto sets dst to a copy of the cached src, converted to dst's type, with gvk's apiVersion
// and kind. The cached object is never shared with dst.
func (c *Cache) copyInto(dst client.Object, src any, gvk schema.GroupVersionKind) error {
	if d, ok := src.(toolscache.DeletedFinalStateUnknown); ok {
		src = d.Obj
	}
	obj, ok := src.(runtime.Object)
	if !ok {
		return fmt.Errorf("crcache: cluster %q: the cache holds a %T, which is not an object", c.cluster, src)
	}
	switch d := dst.(type) {
	case *unstructured.Unstructured:
		if u, ok := obj.(*unstructured.Unstructured); ok {
			u.DeepCopyInto(d)
			break
		}
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			return fmt.Errorf("crcache: cluster %q: %w", c.cluster, err)
		}
		*d = unstructured.Unstructured{Object: m}
	case *metav1.PartialObjectMetadata:
		if p, ok := obj.(*metav1.PartialObjectMetadata); ok {
			p.DeepCopyInto(d)
			break
		}
		m, err := meta.Accessor(obj)
		if err != nil {
			return fmt.Errorf("crcache: cluster %q: %w", c.cluster, err)
		}
		meta.AsPartialObjectMetadata(m).DeepCopyInto(d)
	default:
		switch {
		case reflect.TypeOf(obj) == reflect.TypeOf(dst):
			reflect.ValueOf(dst).Elem().Set(reflect.ValueOf(obj.DeepCopyObject()).Elem())
		case isUnstructured(obj):
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.(*unstructured.Unstructured).Object, dst); err != nil {
				return fmt.Errorf("crcache: cluster %q: %w", c.cluster, err)
			}
		default:
			return fmt.Errorf("crcache: cluster %q caches %s as %T, which cannot be read into a %T (the Registry caches it in another version, or metadata only)", c.cluster, gvk.GroupKind(), obj, dst)
		}
	}
	dst.GetObjectKind().SetGroupVersionKind(gvk)
	return nil
}

func isUnstructured(obj runtime.Object) bool {
	_, ok := obj.(*unstructured.Unstructured)
	return ok
}

// fieldIndexName is controller-runtime's name of a field's index.
func fieldIndexName(field string) string { return "field:" + field }

// allNamespaces is controller-runtime's namespace of index values across namespaces.
const allNamespaces = "__all_namespaces"

// namespacedKey is controller-runtime's index value of v in namespace ("" for all).
func namespacedKey(namespace, v string) string {
	if namespace == "" {
		return allNamespaces + "/" + v
	}
	return namespace + "/" + v
}

// IndexField indexes field of obj's kind with extract, as controller-runtime's informer cache
// does, so that List selects on it with a field selector. The index is the fleet's
// (Fleet.IndexField).
func (c *Cache) IndexField(ctx context.Context, obj client.Object, field string, extract client.IndexerFunc) error {
	return c.f.IndexField(ctx, obj, field, extract)
}

// IndexField indexes field of obj's kind in every cluster, current and future: a second
// IndexField of the same field of a kind, from any Cache of the Fleet, keeps the first. A kind
// that no cluster has resolved yet is indexed once one has (a read of it, or the Provider's
// next sync, adds it); a kind the Registry does not cache is an error.
func (f *Fleet) IndexField(_ context.Context, obj client.Object, field string, extract client.IndexerFunc) error {
	gvk, err := f.kindOf(obj)
	if err != nil {
		return err
	}
	t, err := f.Cache("").resolve(gvk)
	var nc *cache.ErrResourceNotCached
	if errors.As(err, &nc) && !f.allResolved() {
		f.mu.Lock()
		f.pending = append(f.pending, pendingIndex{gk: gvk.GroupKind(), obj: obj, field: field, extract: extract})
		f.pendingN.Store(int32(len(f.pending)))
		f.mu.Unlock()
		return nil
	}
	if err != nil {
		return err
	}
	return f.addIndex(t, obj, field, extract)
}

// allResolved reports whether every resource of the Registry has been resolved by some cluster
// (its group and kind are known): a kind that matches none of them is then not cached. While
// one is not (its clusters are starting, unreachable, or none serves it), a kind not found
// may be that one: reads of it wait, and its IndexFields wait (pending).
func (f *Fleet) allResolved() bool {
	statuses := f.reg.Status()
	for _, res := range f.reg.Resources() {
		resolved := false
		for _, cs := range statuses {
			for _, rs := range cs.Resources {
				resolved = resolved || (rs.Resource == res && rs.Kind != "")
			}
		}
		if !resolved {
			return false
		}
	}
	return true
}

// addPendingIndexes adds the pending IndexFields whose kind has resolved since (all kinds
// when gk is nil; only gk's otherwise, which reads ask for before they read gk: its kind
// resolved, so the index is added without looking at the Registry's status). A look at every
// kind happens at most once a second: it reads the Registry's status. With nothing pending,
// as in the steady state, it takes no lock: reads call it. pendingN stays above zero until the
// IndexFields taken out have been added, so that a concurrent read waits for them.
func (f *Fleet) addPendingIndexes(gk *schema.GroupKind) {
	if f.pendingN.Load() == 0 {
		return
	}
	f.adding.Lock()
	defer f.adding.Unlock()
	f.mu.Lock()
	var todo, keep []pendingIndex
	for _, pi := range f.pending {
		if gk == nil || pi.gk == *gk {
			todo = append(todo, pi)
		} else {
			keep = append(keep, pi)
		}
	}
	if len(todo) == 0 || (gk == nil && time.Since(f.pendingTried) < time.Second) {
		f.mu.Unlock()
		return
	}
	if gk == nil {
		f.pendingTried = time.Now()
	}
	f.pending = keep
	f.mu.Unlock()
	for _, pi := range todo {
		if err := f.IndexField(context.Background(), pi.obj, pi.field, pi.extract); err != nil {
			f.mu.Lock()
			f.pending = append(f.pending, pi)
			f.mu.Unlock()
		}
	}
	f.mu.Lock()
	f.pendingN.Store(int32(len(f.pending)))
	f.mu.Unlock()
}

func (f *Fleet) addIndex(t target, obj client.Object, field string, extract client.IndexerFunc) error {
	name := fieldIndexName(field)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.indexes[t.resource][name] {
		return nil
	}
	fn := func(raw any) ([]string, error) {
		o, ok := raw.(client.Object)
		if !ok {
			return nil, fmt.Errorf("object of type %T is not an Object", raw)
		}
		if isUnstructured(o) && !isUnstructured(obj) {
			// extract was written for obj's type: give it one.
			typed := obj.DeepCopyObject().(client.Object)
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.(*unstructured.Unstructured).Object, typed); err != nil {
				return nil, err
			}
			o = typed
		}
		raws := extract(o)
		ns := o.GetNamespace()
		vals := make([]string, 0, 2*len(raws))
		for _, v := range raws {
			vals = append(vals, namespacedKey("", v))
			if ns != "" {
				vals = append(vals, namespacedKey(ns, v))
			}
		}
		return vals, nil
	}
	if err := t.agg.AddIndex(aggregate.IndexSpec{Name: name, Func: fn}); err != nil {
		return fmt.Errorf("crcache: IndexField %s %q: %w", t.gvk.Kind, field, err)
	}
	if f.indexes[t.resource] == nil {
		f.indexes[t.resource] = map[string]bool{}
	}
	f.indexes[t.resource][name] = true
	return nil
}

// GetInformer returns the informer of obj's kind in this cluster: its handlers are the
// aggregate's, bound to this cluster. By default it waits for the cluster's store to sync
// (cache.BlockUntilSynced).
func (c *Cache) GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error) {
	gvk, err := c.f.kindOf(obj)
	if err != nil {
		return nil, err
	}
	return c.informer(ctx, gvk, opts)
}

// GetInformerForKind is GetInformer for gvk.
func (c *Cache) GetInformerForKind(ctx context.Context, gvk schema.GroupVersionKind, opts ...cache.InformerGetOption) (cache.Informer, error) {
	return c.informer(ctx, gvk, opts)
}

func (c *Cache) informer(ctx context.Context, gvk schema.GroupVersionKind, opts []cache.InformerGetOption) (cache.Informer, error) {
	t, err := c.resolveWait(ctx, gvk)
	if err != nil {
		return nil, err
	}
	var o cache.InformerGetOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.BlockUntilSynced == nil || *o.BlockUntilSynced {
		if err := c.waitSynced(ctx, t); err != nil {
			return nil, err
		}
	}
	return &informer{c: c, t: t}, nil
}

// RemoveInformer removes the handlers this Cache's informers of obj's kind added. The stack
// itself is the Registry's, shared, and keeps running.
func (c *Cache) RemoveInformer(_ context.Context, obj client.Object) error {
	gvk, err := c.f.kindOf(obj)
	if err != nil {
		return err
	}
	t, err := c.resolve(gvk)
	if err != nil {
		return err
	}
	c.mu.Lock()
	regs := c.handlers[t.resource]
	delete(c.handlers, t.resource)
	c.mu.Unlock()
	for _, r := range regs {
		r.Remove()
	}
	return nil
}

// Start blocks until ctx ends: the Registry, not the Cache, runs the informers (Fleet.Start or
// the daemon). When ctx ends, the handlers this Cache's informers added are removed, and its
// informers add no more.
func (c *Cache) Start(ctx context.Context) error {
	<-ctx.Done()
	c.mu.Lock()
	all := c.handlers
	c.handlers = map[string][]*aggregate.Registration{}
	c.stopped = true
	c.mu.Unlock()
	for _, regs := range all {
		for _, r := range regs {
			r.Remove()
		}
	}
	return nil
}

// WaitForCacheSync waits until every resource the cluster serves has synced once (a whole list,
// aggregate.HasList), and reports whether it did before ctx ended (false too for a cluster not
// in the fleet).
func (c *Cache) WaitForCacheSync(ctx context.Context) bool {
	for {
		cs, ok := c.f.reg.ClusterStatus(c.cluster)
		if !ok && c.f.reg.Loaded() {
			return false // the fleet's source does not have it
		}
		synced := ok && len(cs.Resources) > 0
		for _, rs := range cs.Resources {
			if rs.State == clusterset.NotServed {
				continue
			}
			agg, ok := c.f.reg.Aggregate(rs.Resource)
			synced = synced && ok && agg.HasList(c.cluster)
		}
		if synced {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(c.f.poll):
		}
	}
}
