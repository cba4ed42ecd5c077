package aggregate

import (
	"context"
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
)

// Index names every Aggregate answers without an index function of its own.
const (
	// IndexCluster's values are cluster names: ByIndex(IndexCluster, "fleet-1") lists one member.
	IndexCluster = "cluster"
	// IndexClusterNamespace's values are "cluster/namespace".
	IndexClusterNamespace = "cluster-namespace"
	// IndexNamespace is client-go's namespace index, installed on every member.
	IndexNamespace = cache.NamespaceIndex
)

// IndexSpec is a fleet-wide index: Func runs in every member whose cluster matches one of the
// Clusters globs (path.Match syntax; empty means every cluster), joined now or later.
type IndexSpec struct {
	Name     string
	Func     cache.IndexFunc
	Clusters []string
}

// Validate reports a missing name or function, a built-in name, or a bad cluster glob.
func (s IndexSpec) Validate() error {
	if s.Name == "" || s.Func == nil {
		return fmt.Errorf("index: name and function are required")
	}
	if s.Name == IndexCluster || s.Name == IndexClusterNamespace || s.Name == IndexNamespace {
		return fmt.Errorf("index %q: the name is built in", s.Name)
	}
	for _, g := range s.Clusters {
		if _, err := path.Match(g, ""); err != nil {
			return fmt.Errorf("index %q: clusters: bad glob %q: %w", s.Name, g, err)
		}
	}
	return nil
}

func (s IndexSpec) appliesTo(cluster string) bool {
	if len(s.Clusters) == 0 {
		return true
	}
	for _, g := range s.Clusters {
		if ok, _ := path.Match(g, cluster); ok {
			return true
		}
	}
	return false
}

// Options configures an Aggregate.
type Options struct {
	// Resource names what the Aggregate holds, for logs. Required.
	Resource string
	// Logger receives handler panics and membership changes. Default: no-op.
	Logger *zap.Logger
	// SyncPollInterval is how often a joining member's sync is checked. Default 50ms.
	SyncPollInterval time.Duration
	// LearnedIndexes bounds how many summary keys asked again become count indexes
	// (learned.go); LearnedIndexBytes bounds their memory, and each kept index's (KeepCounts).
	// Defaults DefaultLearnedIndexes and DefaultLearnedIndexBytes; LearnedIndexes < 0 learns
	// none.
	LearnedIndexes    int
	LearnedIndexBytes int64
	// SortIndexes bounds how many orders of sorted lists asked again become sort indexes
	// (sorted.go); SortIndexBytes bounds their memory. Defaults DefaultSortIndexes and
	// DefaultSortIndexBytes; SortIndexes < 0 learns none.
	SortIndexes    int
	SortIndexBytes int64
	// CountedKeys are summary keys whose counts are kept from the start (KeepCounts): the
	// first summary by one reads counts, not objects. nil: DefaultCountedKeys; an empty
	// slice keeps none. Keys of an index are kept with KeepCounts once it is added.
	CountedKeys []string
}

// DefaultCountedKeys is Options.CountedKeys' default: objects per cluster and namespace, a
// map per cluster kept by one handler.
var DefaultCountedKeys = []string{"namespace"}

// Aggregate is the fleet-wide, cluster-qualified cache of one resource type. Its read side has
// the shape of cache.Indexer's, with Key strings for keys. It is safe for concurrent use.
type Aggregate struct {
	resource string
	log      *zap.Logger
	poll     time.Duration

	mu      sync.RWMutex // guards members, indexes, regs, lifecycle; never held while taking a member's mu
	members map[string]*member
	// lifecycle serializes Join and Leave per cluster, so that one cluster's membership
	// changes happen one at a time while other clusters' and queries go on. One small mutex
	// per cluster joining or leaving at the moment.
	lifecycle map[string]*clusterLock
	sorted    atomic.Pointer[[]*member] // members by cluster name; replaced whole under mu
	indexes   map[string]IndexSpec
	regs      []*Registration
	learn     *learner
	sorts     *sorts
}

// New returns an empty Aggregate, and the Membership through which its owner (whoever runs the
// informers, as clusterset.Registry does) adds, replaces and removes members. Readers get the
// Aggregate only.
func New(opts Options) (*Aggregate, *Membership, error) {
	if opts.Resource == "" {
		return nil, nil, fmt.Errorf("aggregate: Options.Resource is required")
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.SyncPollInterval == 0 {
		opts.SyncPollInterval = 50 * time.Millisecond
	}
	a := &Aggregate{
		resource:  opts.Resource,
		log:       opts.Logger.With(zap.String("resource", opts.Resource)),
		poll:      opts.SyncPollInterval,
		members:   map[string]*member{},
		indexes:   map[string]IndexSpec{},
		lifecycle: map[string]*clusterLock{},
	}
	n, b := opts.LearnedIndexes, opts.LearnedIndexBytes
	switch {
	case n < 0:
		n = 0 // learns none; kept counts are kept still
	case n == 0:
		n = DefaultLearnedIndexes
	}
	if b <= 0 {
		b = DefaultLearnedIndexBytes
	}
	a.learn = newLearner(n, b)
	n, b = opts.SortIndexes, opts.SortIndexBytes
	switch {
	case n < 0:
		n = 0
	case n == 0:
		n = DefaultSortIndexes
	}
	if b <= 0 {
		b = DefaultSortIndexBytes
	}
	a.sorts = newSorts(n, b)
	if opts.CountedKeys == nil {
		opts.CountedKeys = DefaultCountedKeys
	}
	for i, by := range opts.CountedKeys {
		if err := a.KeepCounts(by); err != nil {
			return nil, nil, fmt.Errorf("aggregate %s: Options.CountedKeys[%d]: %w", opts.Resource, i, err)
		}
	}
	return a, &Membership{a: a}, nil
}

// Membership changes which clusters an Aggregate spans. Only the Aggregate's owner holds it.
type Membership struct{ a *Aggregate }

// Join makes inf the member for cluster. inf must have been built with an Indexers map (the
// Aggregate installs its indexes in it); it may be started before or after Join; its owner
// stops it.
//
// If cluster is a member already, inf replaces its informer (rotated credentials, a new
// server), and the old informer must have stopped, so that its store is final; Join fails
// otherwise. Handlers are first told whatever that store holds that client-go had not yet
// delivered; queries keep reading it until inf has synced; then handlers are told only what
// differs (an object whose name another UID now has: a delete, then an add).
func (ms *Membership) Join(cluster string, inf cache.SharedIndexInformer) error {
	if err := ms.a.join(cluster, inf); err != nil {
		return err
	}
	ms.a.learn.runKept(ms.a) // once the member is published: the kept indexes' handler binds it
	return nil
}

// Leave removes cluster: every handler is told, as a cache.DeletedFinalStateUnknown, that each
// object it was told of is gone, whatever the informer holds. The owner stops the informer,
// before or after.
func (ms *Membership) Leave(cluster string) {
	ms.a.leave(cluster, false)
	ms.a.learn.stopKeptIfEmpty(ms.a)
}

// Close stops what the Aggregate runs on its own, for an owner that is done with it: the
// handlers of its kept counts, learned indexes and sort indexes. Its members stay, with their
// last state, and answer lists as before; summaries and sorted lists read objects, and nothing
// is learned from then on. A Registry closes its aggregates when Start returns.
func (ms *Membership) Close() {
	ms.a.learn.close()
	ms.a.sorts.mu.Lock()
	ms.a.sorts.closeLocked()
	ms.a.sorts.mu.Unlock()
}

// Handoff removes cluster because another replica serves it now, not because its objects or
// the cluster are gone. Queries stop reading it at once, as after Leave. A handler that
// implements HandoffHandler is told once, with OnHandoff; any other handler is told of each
// object's removal as after Leave, so that its view stays equal to the Aggregate's.
func (ms *Membership) Handoff(cluster string) {
	ms.a.leave(cluster, true)
	ms.a.learn.stopKeptIfEmpty(ms.a)
}

// SetDegraded marks cluster's member as failing (true) or healthy again (false). While
// degraded, the member still answers from its last state, and every answer lists it as
// unsynced.
func (ms *Membership) SetDegraded(cluster string, degraded bool) {
	if m := ms.a.member(cluster); m != nil {
		m.degraded.Store(degraded)
	}
}

// Resource is the name given in Options.
func (a *Aggregate) Resource() string { return a.resource }

func objectKey(obj any) (string, bool) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	return key, err == nil && key != ""
}

// AddIndex installs spec in every current member it applies to, and in every later one.
func (a *Aggregate) AddIndex(spec IndexSpec) error {
	if err := spec.Validate(); err != nil {
		return err
	}
	a.mu.Lock()
	if _, dup := a.indexes[spec.Name]; dup {
		a.mu.Unlock()
		return fmt.Errorf("index %q: already added", spec.Name)
	}
	a.indexes[spec.Name] = spec
	members := a.memberList()
	a.mu.Unlock()
	for _, m := range members {
		if !spec.appliesTo(m.cluster) || m.informer.IsStopped() {
			// A stopped informer's store is final and takes no index; its member is about
			// to be replaced or to leave, and its replacement gets the index when it joins.
			continue
		}
		if _, ok := m.informer.GetIndexer().GetIndexers()[spec.Name]; ok {
			continue // installed by a Join that published after the spec was added
		}
		if err := m.informer.AddIndexers(cache.Indexers{spec.Name: spec.Func}); err != nil {
			return fmt.Errorf("index %q: cluster %q: %w", spec.Name, m.cluster, err)
		}
	}
	return nil
}

// GetIndexers returns the indexes added with AddIndex, by name, as client-go's Indexer does
// (the built-in cluster, cluster-namespace and namespace indexes excepted).
func (a *Aggregate) GetIndexers() cache.Indexers {
	a.mu.RLock()
	defer a.mu.RUnlock()
	out := make(cache.Indexers, len(a.indexes))
	for name, spec := range a.indexes {
		out[name] = spec.Func
	}
	return out
}

// clusterLock serializes one cluster's Join and Leave. users counts the calls that hold it or
// wait for it (under the Aggregate's mu): the last to let go removes it, so that lifecycle
// keeps no name of a cluster that has passed through.
type clusterLock struct {
	sync.Mutex
	users int
}

// lockLifecycle takes the lock that serializes cluster's Join and Leave, and returns its
// release.
func (a *Aggregate) lockLifecycle(cluster string) (unlock func()) {
	a.mu.Lock()
	l := a.lifecycle[cluster]
	if l == nil {
		l = &clusterLock{}
		a.lifecycle[cluster] = l
	}
	l.users++
	a.mu.Unlock()
	l.Lock()
	return func() {
		l.Unlock()
		a.mu.Lock()
		if l.users--; l.users == 0 {
			delete(a.lifecycle, cluster)
		}
		a.mu.Unlock()
	}
}

// installIndexesLocked installs in inf the namespace index and every index that applies to
// cluster. Callers hold a.mu.
func (a *Aggregate) installIndexesLocked(cluster string, inf cache.SharedIndexInformer) error {
	have := inf.GetIndexer().GetIndexers()
	if have == nil {
		// client-go's store cannot take indexers later if it was built without a map.
		return fmt.Errorf("informer built with nil Indexers; pass cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}")
	}
	want := cache.Indexers{}
	if _, ok := have[IndexNamespace]; !ok {
		want[IndexNamespace] = cache.MetaNamespaceIndexFunc
	}
	for name, spec := range a.indexes {
		if _, ok := have[name]; !ok && spec.appliesTo(cluster) {
			want[name] = spec.Func
		}
	}
	if len(want) == 0 {
		return nil
	}
	return inf.AddIndexers(want)
}

// memberList returns the members sorted by cluster. Callers hold a.mu.
func (a *Aggregate) memberList() []*member {
	ms := make([]*member, 0, len(a.members))
	for _, m := range a.members {
		ms = append(ms, m)
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].cluster < ms[j].cluster })
	return ms
}

// resort publishes the sorted member list. Callers hold a.mu for writing.
func (a *Aggregate) resort() {
	ms := a.memberList()
	a.sorted.Store(&ms)
}

// snapshot returns the members sorted by cluster, without locking or allocating. The slice is
// shared: never modify it.
func (a *Aggregate) snapshot() []*member {
	if p := a.sorted.Load(); p != nil {
		return *p
	}
	return nil
}

func (a *Aggregate) member(cluster string) *member {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.members[cluster]
}

// Clusters lists the member clusters, sorted.
func (a *Aggregate) Clusters() []string {
	ms := a.snapshot()
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.cluster
	}
	return out
}

// Cluster narrows the fleet to one member: an ordinary client-go Indexer with client-go keys.
func (a *Aggregate) Cluster(name string) (cache.Indexer, bool) {
	m := a.member(name)
	if m == nil {
		return nil, false
	}
	return m.current(), true
}

// Len is how many objects cluster's member holds, and whether cluster is a member. Once the
// member's handlers have had its informer's initial list, it is the count of objects they were
// told, read in O(1) (the store is ahead of that by the events in flight, if any); before
// that, and with no handler bound, it counts the store's keys, in O(objects).
func (a *Aggregate) Len(cluster string) (int, bool) {
	m := a.member(cluster)
	if m == nil {
		return 0, false
	}
	m.mu.Lock()
	if !m.gone && ((m.feed != nil && m.fed && m.shadow == nil) || m.frozen) { // (a retired member's told is gone)
		n := len(m.told)
		m.mu.Unlock()
		return n, true
	}
	m.mu.Unlock()
	return len(m.current().ListKeys()), true
}

// HasSynced reports whether cluster's member is fresh: its informer has synced and runs, its
// initial list has been handed to the handlers, and it is not marked degraded.
func (a *Aggregate) HasSynced(cluster string) bool {
	m := a.member(cluster)
	return m != nil && m.fresh()
}

// HasList reports whether cluster's member holds a whole list: its informer has synced, even
// if the cluster is degraded or its informer has stopped since (its answers are then its last
// state, maybe stale, never partial). False while a new member's first list is under way.
func (a *Aggregate) HasList(cluster string) bool {
	m := a.member(cluster)
	return m != nil && m.synced.Load()
}

// Unsynced lists the member clusters whose answers may be partial or stale: not synced yet,
// informer stopped, or marked degraded. Sorted.
func (a *Aggregate) Unsynced() []string {
	var out []string
	for _, m := range a.snapshot() {
		if !m.fresh() {
			out = append(out, m.cluster)
		}
	}
	return out
}

// Get returns the object k names.
func (a *Aggregate) Get(k Key) (any, bool, error) {
	m := a.member(k.Cluster)
	if m == nil {
		return nil, false, nil
	}
	return m.current().GetByKey(k.ObjectKey())
}

// GetByKey returns the object a Key string names.
func (a *Aggregate) GetByKey(key string) (any, bool, error) {
	k, err := ParseKey(key)
	if err != nil {
		return nil, false, err
	}
	return a.Get(k)
}

// List returns every object of every member, members in cluster order.
func (a *Aggregate) List() []any {
	var out []any
	for _, m := range a.snapshot() {
		out = append(out, m.current().List()...)
	}
	return out
}

// ListKeys returns the Key strings of every object.
func (a *Aggregate) ListKeys() []string {
	var out []string
	for _, m := range a.snapshot() {
		for _, k := range m.current().ListKeys() {
			out = append(out, m.cluster+Separator+k)
		}
	}
	return out
}

// ByIndex returns the objects whose indexName function yields value, across the fleet, members
// in cluster order. The slice is the caller's.
func (a *Aggregate) ByIndex(indexName, value string) ([]any, error) {
	var buf [16][]any
	parts, err := a.byIndexParts(buf[:0], indexName, value)
	switch len(parts) {
	case 0:
		if err != nil {
			return nil, err
		}
		return []any{}, nil
	case 1:
		return parts[0], err // client-go allocated it for this call
	}
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	out := make([]any, 0, n)
	for _, p := range parts {
		out = append(out, p...)
	}
	return out, err
}

// AppendByIndex appends to dst the objects ByIndex would return, in the same order, and returns
// the extended slice. Like append, it grows dst only when dst lacks the capacity, so a caller
// that passes the previous result back as dst[:0] reuses one array across queries (the array
// holds the previous answer's objects until they are overwritten). On error, the objects of the
// members before the failing one have been appended, as ByIndex returns them.
//
// Besides growing dst, the only allocations are client-go's: each member store's
// Indexer.ByIndex returns a new slice (16 bytes per object, none when it finds nothing). More
// than 16 members finding objects add one more.
func (a *Aggregate) AppendByIndex(dst []any, indexName, value string) ([]any, error) {
	var buf [16][]any
	parts, err := a.byIndexParts(buf[:0], indexName, value)
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	dst = slices.Grow(dst, n)
	for _, p := range parts {
		dst = append(dst, p...)
	}
	return dst, err
}

// byIndexParts appends to parts each member's non-empty answer to a fleet index lookup, members
// in cluster order. Every part is a slice its store allocated for this call.
func (a *Aggregate) byIndexParts(parts [][]any, indexName, value string) ([][]any, error) {
	err := a.eachIndexed(indexName, value, func(m *member, store cache.Indexer, idx, v string) error {
		var objs []any
		var err error
		if idx == "" {
			objs = store.List()
		} else {
			objs, err = store.ByIndex(idx, v)
		}
		if len(objs) > 0 {
			parts = append(parts, objs)
		}
		return err
	})
	return parts, err
}

// IndexKeys returns the Key strings of the objects ByIndex would return.
func (a *Aggregate) IndexKeys(indexName, value string) ([]string, error) {
	var out []string
	err := a.eachIndexed(indexName, value, func(m *member, store cache.Indexer, idx, v string) error {
		var keys []string
		if idx == "" {
			keys = store.ListKeys()
		} else {
			var err error
			if keys, err = store.IndexKeys(idx, v); err != nil {
				return err
			}
		}
		for _, k := range keys {
			out = append(out, m.cluster+Separator+k)
		}
		return nil
	})
	return out, err
}

// eachIndexed resolves a fleet index lookup to per-member lookups: idx == "" means "the whole
// member".
func (a *Aggregate) eachIndexed(indexName, value string, f func(m *member, store cache.Indexer, idx, v string) error) error {
	switch indexName {
	case IndexCluster:
		if m := a.member(value); m != nil {
			return f(m, m.current(), "", "")
		}
		return nil
	case IndexClusterNamespace:
		cluster, ns, ok := strings.Cut(value, "/")
		if !ok {
			return fmt.Errorf("index %q: value %q is not cluster/namespace", indexName, value)
		}
		if m := a.member(cluster); m != nil {
			return f(m, m.current(), IndexNamespace, ns)
		}
		return nil
	}
	a.mu.RLock()
	spec, ok := a.indexes[indexName]
	a.mu.RUnlock()
	if !ok && indexName != IndexNamespace {
		return fmt.Errorf("index %q does not exist", indexName)
	}
	for _, m := range a.snapshot() {
		if ok && !spec.appliesTo(m.cluster) {
			continue
		}
		if err := f(m, m.current(), indexName, value); err != nil {
			return fmt.Errorf("cluster %q: %w", m.cluster, err)
		}
	}
	return nil
}

// Namespaces returns the namespaces in which the member cluster's store holds objects now,
// sorted ("" alone for a cluster-scoped resource's); nil when cluster is not a member. It reads
// the namespace index's values, no object.
func (a *Aggregate) Namespaces(cluster string) []string {
	m := a.member(cluster)
	if m == nil {
		return nil
	}
	out := m.current().ListIndexFuncValues(IndexNamespace)
	sort.Strings(out)
	return out
}

// ListIndexFuncValues returns the distinct values of an index across the fleet, sorted.
func (a *Aggregate) ListIndexFuncValues(indexName string) []string {
	if indexName == IndexCluster {
		return a.Clusters()
	}
	set := map[string]struct{}{}
	for _, m := range a.snapshot() {
		store := m.current()
		if indexName == IndexClusterNamespace {
			for _, ns := range store.ListIndexFuncValues(IndexNamespace) {
				set[m.cluster+"/"+ns] = struct{}{}
			}
			continue
		}
		for _, v := range store.ListIndexFuncValues(indexName) {
			set[v] = struct{}{}
		}
	}
	out := make([]string, 0, len(set))
	for v := range set {
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}

// WaitForSync waits until every member has synced, ctx ends, or timeout passes, whichever is
// first, and returns the clusters still unsynced. A dead cluster therefore costs at most timeout.
func (a *Aggregate) WaitForSync(ctx context.Context, timeout time.Duration) []string {
	_ = wait.PollUntilContextTimeout(ctx, a.poll, timeout, true, func(context.Context) (bool, error) {
		return len(a.Unsynced()) == 0, nil
	})
	return a.Unsynced()
}
