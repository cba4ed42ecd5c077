package clusterset

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"github.com/multicache/multicache/pkg/aggregate"
)

// Options configures a Registry.
type Options struct {
	// Source yields the clusters. Required.
	Source Source
	// Resources to cache in every cluster. At least one.
	Resources []ResourceSpec
	// Logger. Default: no-op.
	Logger *zap.Logger
	// QPS and Burst limit each cluster's client. Defaults 50 and 100. A negative QPS turns the
	// client-side limit off, as in rest.Config.
	QPS   float32
	Burst int
	// UserAgent of every request to the clusters. Default "multicache".
	UserAgent string
	// DisableCompression asks every cluster's API server for uncompressed answers, as
	// kubectl's --disable-compression does: a large list is then not gzipped by the API
	// server and unzipped here, which costs CPU on both sides, and more bytes cross the
	// network. A cluster whose kubeconfig sets disable-compression answers uncompressed either
	// way. It holds for clusters reached over TLS: client-go gives a cluster without TLS
	// options Go's default transport, which asks for gzip whatever the config says.
	DisableCompression bool
	// DiscoveryInterval is how often resources a cluster does not serve are looked up again
	// (a CRD installed later). Default 30s.
	DiscoveryInterval time.Duration
	// RetryMax caps the backoff between failed discovery attempts. Default 30s.
	RetryMax time.Duration
	// ProbeInterval is how often each cluster's API server is probed (GET /version, no retries).
	// client-go's reflector retries a refused or reset connection internally without reporting
	// it, so without the probe an outage would not show in the status. Default 5s.
	ProbeInterval time.Duration
	// ProbeTimeout bounds one probe. Default 5s.
	ProbeTimeout time.Duration
	// UnpagedListMax is the largest first list, in objects, fetched as client-go's LIST (which
	// an API server answers from its watch cache in one response); a larger one, or one whose
	// size is unknown, streams (watch-list). See unpaged.go. Default DefaultUnpagedListMax, or
	// MULTICACHE_UNPAGED_LIST_MAX when set; negative: every first list streams.
	UnpagedListMax int
	// UnpagedListBudget bounds the objects of first lists listed (not streamed) at once, across
	// every cluster and resource, each counted from its estimate until its stack's first sync:
	// their responses and decoded objects are all in memory until stored. A list that does not
	// fit streams. Default DefaultUnpagedListBudget.
	UnpagedListBudget int
}

// Default fills every unset field with its default.
func (o *Options) Default() {
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.QPS == 0 {
		o.QPS = 50
	}
	if o.Burst == 0 {
		o.Burst = 100
	}
	if o.UserAgent == "" {
		o.UserAgent = "multicache"
	}
	if o.DiscoveryInterval == 0 {
		o.DiscoveryInterval = 30 * time.Second
	}
	if o.RetryMax == 0 {
		o.RetryMax = 30 * time.Second
	}
	if o.ProbeInterval == 0 {
		o.ProbeInterval = 5 * time.Second
	}
	if o.ProbeTimeout == 0 {
		o.ProbeTimeout = 5 * time.Second
	}
	if o.UnpagedListMax == 0 {
		o.UnpagedListMax = unpagedListMaxFromEnv(DefaultUnpagedListMax)
	}
	if o.UnpagedListBudget == 0 {
		o.UnpagedListBudget = DefaultUnpagedListBudget
	}
}

// Validate reports every bad field, each named as the config file names it
// ("resources[1].mode").
func (o Options) Validate() error {
	var errs []error
	if o.Source == nil {
		errs = append(errs, errors.New("clusterset: Options.Source is required"))
	}
	if len(o.Resources) == 0 {
		errs = append(errs, errors.New("resources: at least one resource is required"))
	}
	seen := map[string]bool{}
	for i, r := range o.Resources {
		if err := r.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("resources[%d].%w", i, err))
		}
		if seen[r.Name] {
			errs = append(errs, fmt.Errorf("resources[%d].name: %q listed twice", i, r.Name))
		}
		seen[r.Name] = true
	}
	if o.Burst < 0 {
		errs = append(errs, fmt.Errorf("burst: %d: must not be negative", o.Burst))
	}
	if o.UnpagedListBudget < 0 {
		errs = append(errs, fmt.Errorf("unpagedListBudget: %d: must not be negative (0: the default)", o.UnpagedListBudget))
	}
	return errors.Join(errs...)
}

// Registry runs the fleet: one cluster runner per cluster the Source yields, one Aggregate per
// resource.
type Registry struct {
	opts  Options
	log   *zap.Logger
	aggs  map[string]*aggregate.Aggregate
	mems  map[string]*aggregate.Membership // the aggregates' owner hooks: only runners use them
	board statusBoard

	loaded chan struct{} // closed once the source has been loaded the first time

	shelf shelf // states of clusters handed off, for their next owners (handover.go)
	taker Taker // finds the states other replicas handed off; nil: none

	unpaged *listBudget // objects of the unpaged first lists under way (unpaged.go)

	mu       sync.Mutex
	clusters map[string]*runner
	// ordered are clusters' runners sorted by name; nil once clusters changed, until the
	// next read sorts them again. A sorted slice is never modified: a change drops it.
	ordered  []*runner
	retiring map[string]*runner // stopping (and, if removed, leaving); a cluster's next runner waits for it
	started  bool
}

// New validates opts and builds the aggregates. Nothing runs until Start.
func New(opts Options) (*Registry, error) {
	opts.Default()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	r := &Registry{opts: opts, log: opts.Logger, aggs: map[string]*aggregate.Aggregate{}, mems: map[string]*aggregate.Membership{}, clusters: map[string]*runner{}, retiring: map[string]*runner{}, loaded: make(chan struct{}),
		unpaged: &listBudget{free: opts.UnpagedListBudget}}
	for _, spec := range opts.Resources {
		agg, mem, err := aggregate.New(aggregate.Options{Resource: spec.Name, Logger: opts.Logger})
		if err != nil {
			return nil, err
		}
		for _, ix := range spec.Indexes {
			if err := agg.AddIndex(ix); err != nil {
				return nil, fmt.Errorf("resource %q: %w", spec.Name, err)
			}
		}
		for j, by := range spec.Counts {
			if err := agg.KeepCounts(by); err != nil {
				return nil, fmt.Errorf("resource %q: counts[%d]: %w", spec.Name, j, err)
			}
		}
		r.aggs[spec.Name], r.mems[spec.Name] = agg, mem
	}
	return r, nil
}

// Aggregate returns the fleet-wide cache of a configured resource, by the name it was configured
// with.
func (r *Registry) Aggregate(resource string) (*aggregate.Aggregate, bool) {
	a, ok := r.aggs[resource]
	return a, ok
}

// Resources lists the configured resource names in configuration order.
func (r *Registry) Resources() []string {
	out := make([]string, len(r.opts.Resources))
	for i, s := range r.opts.Resources {
		out[i] = s.Name
	}
	return out
}

// Start runs until ctx ends: it loads the source, engages its clusters and follows its changes.
// On return every cluster's goroutines have ended, and the aggregates are closed
// (aggregate.Membership.Close): they keep their clusters' last state and run no handler of
// their own. It fails only if called twice; a bad or unreachable cluster is reported in its
// status instead.
func (r *Registry) Start(ctx context.Context) error {
	r.mu.Lock()
	if r.started {
		r.mu.Unlock()
		return errors.New("clusterset: Registry already started")
	}
	r.started = true
	r.mu.Unlock()
	changes := r.opts.Source.Changes(ctx)
	r.reload(ctx)
	close(r.loaded)
	for {
		select {
		case <-ctx.Done():
			r.stopAll()
			for _, mem := range r.mems {
				mem.Close() // the aggregates keep their last state, and run nothing more
			}
			return nil
		case <-changes:
			r.reload(ctx)
		}
	}
}

// reload applies the source's current clusters: engage new ones, disengage removed ones and
// restart changed ones. It never waits for a cluster: runners stop and leave in their own
// goroutines, and a cluster's next runner starts once its previous one has retired.
func (r *Registry) reload(ctx context.Context) {
	cfgs, err := r.opts.Source.Load()
	r.mu.Lock()
	defer r.mu.Unlock()
	var complete *CompleteError
	partial := err != nil && !errors.As(err, &complete)
	if err != nil {
		r.log.Error("cluster source", zap.Error(err))
		if cfgs == nil && partial {
			return // nothing usable: keep what runs
		}
	}
	want := map[string]ClusterConfig{}
	for _, c := range cfgs {
		want[c.Name] = c
	}
	for name, run := range r.clusters {
		if _, ok := want[name]; ok {
			continue
		}
		if partial {
			// The load was partial: a cluster missing from it may be one of the bad entries
			// (a kubeconfig caught mid-rotation), not a removed one. Keep it until a clean load.
			continue
		}
		how := removal
		if hs, ok := r.opts.Source.(HandoffSource); ok && hs.Retains(name) {
			how = handoff
		}
		r.log.Info("disengaging cluster", zap.String("cluster", name), zap.Bool("handoff", how == handoff))
		delete(r.clusters, name)
		r.ordered = nil
		r.retiring[name] = run
		go r.retire(run, how)
	}
	for _, c := range cfgs {
		old := r.clusters[c.Name]
		if old != nil && old.cfg.Fingerprint == c.Fingerprint && (old.cfg.Waiting == "") == (c.Waiting == "") {
			old.setSource(c.Health, c.Waiting)
			continue
		}
		prev := old
		switch {
		case old != nil && old.cfg.Waiting != "" && c.Waiting == "":
			r.log.Info("starting cluster: its source no longer holds it back", zap.String("cluster", c.Name))
		case old != nil && old.cfg.Waiting == "" && c.Waiting != "":
			r.log.Info("stopping cluster: its source holds it back", zap.String("cluster", c.Name), zap.String("why", c.Waiting))
		case old != nil:
			r.log.Info("restarting cluster: server or credentials changed", zap.String("cluster", c.Name))
		}
		if old != nil {
			r.retiring[c.Name] = old
			go r.retire(old, restart)
		} else {
			r.log.Info("engaging cluster", zap.String("cluster", c.Name), zap.String("origin", c.Origin))
			prev = r.retiring[c.Name] // removed a moment ago and back already
		}
		// The new stacks replace the old ones in the aggregates once those have stopped, so
		// that their stores are final (aggregate.Join); until then the old stores keep
		// answering queries, marked unsynced.
		run := newRunner(ctx, r, c, prev)
		if old != nil {
			run.restarts = old.restarts
			if old.cfg.Waiting == "" {
				run.restarts++ // a cluster that only waited had no stacks to rebuild
			}
		}
		r.clusters[c.Name] = run
		r.ordered = nil
		go run.run()
	}
}

// retire retires run and forgets it once done.
func (r *Registry) retire(run *runner, how retirement) {
	run.retire(how)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.retiring[run.cfg.Name] == run {
		delete(r.retiring, run.cfg.Name)
	}
}

// stopAll stops every runner, retiring ones included, and waits for them.
func (r *Registry) stopAll() {
	r.mu.Lock()
	runs := make([]*runner, 0, len(r.clusters)+len(r.retiring))
	for _, run := range r.clusters {
		runs = append(runs, run)
	}
	for _, run := range r.retiring {
		runs = append(runs, run)
	}
	r.mu.Unlock()
	for _, run := range runs {
		run.stop()
	}
	for _, run := range runs {
		select {
		case <-run.retired:
		case <-run.done:
		}
	}
}

// Running reports whether any stacks of the cluster exist: engaged, or still stopping after it
// left or restarted. A cluster that is not Running has no informer left.
func (r *Registry) Running(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.clusters[name] != nil || r.retiring[name] != nil
}

// RESTConfig is a copy of the config that reaches an engaged cluster, for reading what the
// cluster publishes about itself (its OpenAPI documents); false when the cluster is not
// engaged, or its source could not build a config.
func (r *Registry) RESTConfig(name string) (*rest.Config, bool) {
	r.mu.Lock()
	run := r.clusters[name]
	r.mu.Unlock()
	if run == nil || run.cfg.Config == nil {
		return nil, false
	}
	return rest.CopyConfig(run.cfg.Config), true
}

// Clusters lists the engaged cluster names, sorted.
func (r *Registry) Clusters() []string {
	runs := r.sorted()
	out := make([]string, len(runs))
	for i, run := range runs {
		out[i] = run.cfg.Name
	}
	return out
}

// sorted are the engaged clusters' runners in name order, as of now; the slice is shared
// and must not be modified.
func (r *Registry) sorted() []*runner {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ordered == nil {
		r.ordered = make([]*runner, 0, len(r.clusters))
		for _, run := range r.clusters {
			r.ordered = append(r.ordered, run)
		}
		slices.SortFunc(r.ordered, func(a, b *runner) int { return strings.Compare(a.cfg.Name, b.cfg.Name) })
	}
	return r.ordered
}

// Status returns every engaged cluster's status, sorted by name. It is cheap: it counts no
// objects (the aggregates hold them: Aggregate.Cluster).
func (r *Registry) Status() []ClusterStatus {
	runs := r.sorted()
	out := make([]ClusterStatus, len(runs))
	for i, run := range runs {
		out[i] = run.status()
	}
	return out
}

// ClusterStatus returns one cluster's status.
func (r *Registry) ClusterStatus(name string) (ClusterStatus, bool) {
	r.mu.Lock()
	run := r.clusters[name]
	r.mu.Unlock()
	if run == nil {
		return ClusterStatus{}, false
	}
	return run.status(), true
}

// Subscribe returns state changes as they happen, buffered up to buf; a subscriber that falls
// further behind misses changes (Status always has the current state). Call the function to stop.
func (r *Registry) Subscribe(buf int) (<-chan StatusChange, func()) {
	return r.board.subscribe(buf)
}

// Loaded reports whether Start has loaded the source once: before that, Status lists no
// cluster because none is known yet, not because there is none.
func (r *Registry) Loaded() bool {
	select {
	case <-r.loaded:
		return true
	default:
		return false
	}
}

// WaitForSync waits for Start to load the source, then until every engaged cluster has synced
// every resource it serves, or until timeout, and returns "cluster/resource" for each that had not. A dead cluster thus costs at
// most timeout, and the caller learns which ones are missing.
func (r *Registry) WaitForSync(ctx context.Context, timeout time.Duration) []string {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	select {
	case <-r.loaded:
	case <-ctx.Done():
		return []string{"(the cluster source was not loaded: is Start running?)"}
	}
	var missing []string
	_ = wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(context.Context) (bool, error) {
		missing = missing[:0]
		for _, cs := range r.Status() {
			for _, rs := range cs.Resources {
				if rs.State != Synced && rs.State != NotServed {
					missing = append(missing, cs.Name+"/"+rs.Resource)
				}
			}
		}
		return len(missing) == 0, nil
	})
	if len(missing) == 0 {
		return nil
	}
	return missing
}
