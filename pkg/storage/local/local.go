package local

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/pkg/storage"
	"github.com/multicache/multicache/pkg/watchcache"
)

// Options configures a Storage.
type Options struct {
	Registry *clusterset.Registry // required
	Logger   *zap.Logger
	// WatchBuffer is how many events per resource a watch can resume from. Default 100000.
	WatchBuffer int
	// WatchBufferBytes bounds the memory those events keep alive, estimated from the objects'
	// encoded size. Default 128 MiB.
	WatchBufferBytes int
	// HubMaxPending bounds, per resource, the events the aggregate has delivered to the watch
	// cache and the cache has not yet put in its ring. Beyond it the cache loses events, so
	// every watch of the resource ends with 410 and every position expires. It must exceed the
	// largest burst: a cluster re-pointed at another server tells up to two events per object
	// at once. Default 1,000,000.
	HubMaxPending int
	// BookmarkInterval between BOOKMARK events. Default 5s.
	BookmarkInterval time.Duration
	// DeadClusterTimeout: a cluster × resource that failed before it ever synced counts as
	// not complete (a read that needs it whole is 429) for this long. Default 2m.
	DeadClusterTimeout time.Duration
	// AllowSecretData serves Secrets' data and stringData; otherwise reads leave them out.
	AllowSecretData bool
}

// Default fills every unset field with its default.
func (o *Options) Default() {
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	for _, f := range []struct {
		v   *int
		def int
	}{{&o.WatchBuffer, 100000}, {&o.WatchBufferBytes, 128 << 20}, {&o.HubMaxPending, 1000000}} {
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	if o.BookmarkInterval == 0 {
		o.BookmarkInterval = 5 * time.Second
	}
	if o.DeadClusterTimeout == 0 {
		o.DeadClusterTimeout = 2 * time.Minute
	}
}

// Storage is the Reader and Status of this replica's clusters. Create with New before the
// Registry starts, so that its watch caches see the initial lists.
type Storage struct {
	opts Options
	reg  *clusterset.Registry
	// readStatus reads the Registry's status of its clusters (Registry.Status); reads go
	// through statuses, once per read scope.
	readStatus func() []clusterset.ClusterStatus
	// hubs holds each resource's watch cache, regs its registration as a handler.
	hubs map[string]*watchcache.Cache
	regs map[string]*aggregate.Registration

	aliasMu sync.Mutex
	aliases map[string]string // lower-cased alias → configured resource name
}

var (
	_ storage.Reader = (*Storage)(nil)
	_ storage.Status = (*Storage)(nil)
)

// New makes the Storage and registers a watch cache on every aggregate of the Registry.
func New(opts Options) (*Storage, error) {
	if opts.Registry == nil {
		return nil, errors.New("storage/local: Options.Registry is required")
	}
	opts.Default()
	s := &Storage{opts: opts, reg: opts.Registry, readStatus: opts.Registry.Status, hubs: map[string]*watchcache.Cache{}, regs: map[string]*aggregate.Registration{}, aliases: map[string]string{}}
	for _, res := range s.reg.Resources() {
		agg, _ := s.reg.Aggregate(res)
		h := watchcache.New(watchcache.Options{MaxEvents: opts.WatchBuffer, MaxBytes: opts.WatchBufferBytes, Current: func() []watchcache.Item { return cachedItems(agg) }})
		// Every event, in order: a watch relays the change stream, so an add and delete of the
		// same object while the cache is behind must both reach it. Past HubMaxPending the cache
		// resets (every watch 410) rather than grow without bound.
		hr, err := agg.AddEventHandlerWithOptions(h, aggregate.HandlerOptions{EveryEvent: true, MaxPending: opts.HubMaxPending, OnOverflow: h.Overflow})
		if err != nil {
			s.Close()
			return nil, err
		}
		s.hubs[res], s.regs[res] = h, hr
	}
	return s, nil
}

// Close removes the watch caches from the aggregates and empties their rings; open watches end
// with 410. Reading after Close is not supported.
func (s *Storage) Close() {
	for res, r := range s.regs {
		r.Remove()
		<-r.Done()
		s.hubs[res].Overflow()
	}
}

// Cache is the watch cache of resource, nil for a resource not cached.
func (s *Storage) Cache(resource string) *watchcache.Cache { return s.hubs[resource] }

// Registration is the watch cache's registration on the aggregate of resource.
func (s *Storage) Registration(resource string) *aggregate.Registration { return s.regs[resource] }

// Resolve maps a resource as a user wrote it (plural, singular, kind, short name,
// plural.group, group/version/resource, or the configured name) to the configured name.
func (s *Storage) Resolve(name string) (string, bool) {
	if _, ok := s.reg.Aggregate(name); ok {
		return name, true
	}
	key := strings.ToLower(name)
	s.aliasMu.Lock()
	defer s.aliasMu.Unlock()
	if res, ok := s.aliases[key]; ok {
		return res, true
	}
	for _, cs := range s.reg.Status() {
		for _, rs := range cs.Resources {
			for _, a := range rs.Aliases {
				s.aliases[strings.ToLower(a)] = rs.Resource
			}
		}
	}
	res, ok := s.aliases[key]
	return res, ok
}

// NotCached is the 404 of a resource that is not cached, naming those that are.
func (s *Storage) NotCached(name string) error {
	return storage.Errorf(http.StatusNotFound, "resource %q is not cached (have %s)", name, strings.Join(s.reg.Resources(), ", "))
}

// view is what one request reads of the Registry's status: read once (statuses).
type view struct {
	statuses []clusterset.ClusterStatus
	byRes    map[string]resourceInfo
	own      *owners // built when a read asks for owners
}

// resourceInfo is, per cluster, how it serves a resource (kind, group, version, scope, state).
// Its entries point into the view's statuses (a map's values larger than 128 bytes are each
// allocated apart; a ResourceStatus is): read them, never modify them, and keep them no longer
// than the request (they keep every resource's status of every cluster alive).
type resourceInfo map[string]*clusterset.ResourceStatus

// statusKey is the status of one Storage in a read scope.
type statusKey struct{ s *Storage }

// statuses is the Registry's status of its clusters, sorted by name: read once per read scope
// of ctx (storage.WithReadScope), each time without one. Read it, never modify it.
func (s *Storage) statuses(ctx context.Context) []clusterset.ClusterStatus {
	return storage.Scoped(ctx, statusKey{s}, s.readStatus)
}

func (s *Storage) view(ctx context.Context) *view { return &view{statuses: s.statuses(ctx)} }

// info is how every cluster serves resource.
func (v *view) info(resource string) resourceInfo {
	if ri, ok := v.byRes[resource]; ok {
		return ri
	}
	out := make(resourceInfo, len(v.statuses))
	for i := range v.statuses {
		cs := &v.statuses[i]
		for j := range cs.Resources {
			if cs.Resources[j].Resource == resource {
				out[cs.Name] = &cs.Resources[j]
			}
		}
	}
	if v.byRes == nil {
		v.byRes = map[string]resourceInfo{}
	}
	v.byRes[resource] = out
	return out
}

// clusters are the names of the clusters of the status, sorted.
func (v *view) clusters() []string {
	out := make([]string, len(v.statuses))
	for i, cs := range v.statuses {
		out[i] = cs.Name
	}
	sort.Strings(out)
	return out
}

// names are the clusters of ri, sorted.
func (ri resourceInfo) names() []string {
	out := make([]string, 0, len(ri))
	for c := range ri {
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}

// namespaced reports whether the resource is namespaced where it is resolved (true when
// unknown).
func (ri resourceInfo) namespaced() bool {
	for _, rs := range ri {
		if rs.Kind != "" {
			return rs.Namespaced
		}
	}
	return true
}

// secrets reports whether resource is core Secrets. It fails closed: core Secrets in any
// cluster's discovery, or a configured name that would resolve to them before any has resolved.
func (ri resourceInfo) secrets(resource string) bool {
	for _, rs := range ri {
		if rs.Kind == "Secret" && rs.Group == "" {
			return true
		}
	}
	switch strings.ToLower(resource) {
	case "secrets", "secret", "v1/secrets", "/v1/secrets":
		return true
	}
	return false
}

// plannedFor keeps the planned clusters a resource may have objects in: all but those whose
// resolution found the resource not served. A planned cluster not started yet stays.
func (ri resourceInfo) plannedFor(planned []string) []string {
	return slices.DeleteFunc(slices.Clone(planned), func(c string) bool {
		rs, ok := ri[c]
		return ok && rs.State == clusterset.NotServed
	})
}

// cachedItems lists every object agg holds.
func cachedItems(agg *aggregate.Aggregate) []watchcache.Item {
	result, err := agg.Select(aggregate.Query{})
	if err != nil {
		return nil
	}
	var out []watchcache.Item
	for it := range keyed(result) {
		out = append(out, it)
	}
	return out
}

// keyed yields the items of result with their keys.
func keyed(result aggregate.Result) func(yield func(watchcache.Item) bool) {
	return func(yield func(watchcache.Item) bool) {
		for _, it := range result.Items {
			k, err := aggregate.KeyOf(it.Cluster, it.Object)
			if err != nil {
				continue
			}
			if !yield(watchcache.Item{Key: k, Object: it.Object}) {
				return
			}
		}
	}
}
