package crcache

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// ErrClusterNotFound is Provider.Get's error for a cluster that is not engaged.
var ErrClusterNotFound = errors.New("cluster not found")

// Aware is told of each cluster a Provider engages: multicluster-runtime's multicluster.Aware.
// Engage must not block; ctx ends when the cluster leaves the fleet (or the Provider stops).
type Aware interface {
	Engage(ctx context.Context, name string, cl cluster.Cluster) error
}

// Request is a fleet-wide reconcile request: an object of one cluster.
type Request struct {
	Cluster string
	types.NamespacedName
}

func (r Request) String() string { return r.Cluster + "/" + r.NamespacedName.String() }

// ProviderOptions configures a Provider.
type ProviderOptions struct {
	// Cluster adjusts the options each cluster.Cluster is built with (its scheme, its
	// client's options). NewCache is the cluster's Cache whatever it sets.
	Cluster func(name string, o *cluster.Options)
	// Resync is how often the Provider compares the engaged clusters with the Registry's,
	// besides when the Registry says a cluster changed. Default 5s.
	Resync time.Duration
	// Logger tells of clusters that cannot be engaged. Default: none.
	Logger *zap.Logger
}

// Provider turns the Registry's clusters into engaged controller-runtime cluster.Clusters,
// in the shape of multicluster-runtime's Provider. Each cluster.Cluster reads through its
// Cache (the Fleet's) and writes to its API server.
type Provider struct {
	f    *Fleet
	opts ProviderOptions

	mu      sync.Mutex
	engaged map[string]*engagement
}

type engagement struct {
	cl       cluster.Cluster
	restarts int // the Registry's count for the cluster when engaged: its server and credentials
	cancel   context.CancelFunc
	done     chan struct{} // closed when the cluster.Cluster's Start has returned
}

// restartsOf is how often the Registry rebuilt name's stacks because its server or credentials
// changed: a cluster.Cluster built before writes with the old ones.
func (p *Provider) restartsOf(name string) int {
	cs, _ := p.f.reg.ClusterStatus(name)
	return cs.Restarts
}

// Provider returns the Fleet's Provider.
func (f *Fleet) Provider(opts ProviderOptions) *Provider {
	if opts.Resync <= 0 {
		opts.Resync = 5 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	return &Provider{f: f, opts: opts, engaged: map[string]*engagement{}}
}

// Get returns the engaged cluster name, or ErrClusterNotFound.
func (p *Provider) Get(_ context.Context, name string) (cluster.Cluster, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.engaged[name]; ok {
		return e.cl, nil
	}
	return nil, fmt.Errorf("crcache: cluster %q: %w", name, ErrClusterNotFound)
}

// IndexField indexes field of obj's kind in every cluster, engaged now or later. It may be
// called before any cluster has resolved the kind: the index is then added once one has.
func (p *Provider) IndexField(ctx context.Context, obj client.Object, field string, extract client.IndexerFunc) error {
	return p.f.IndexField(ctx, obj, field, extract)
}

// Start engages every cluster of the Registry, and those that join, with aware, and disengages
// those that leave (their context ends), until ctx ends. A cluster its source holds back
// (ClusterStatus.Waiting) is engaged once it starts. It blocks.
func (p *Provider) Start(ctx context.Context, aware Aware) error {
	changes, unsubscribe := p.f.reg.Subscribe(64)
	defer unsubscribe()
	tick := time.NewTicker(p.opts.Resync)
	defer tick.Stop()
	defer p.disengageAll()
	for {
		if err := p.sync(ctx, aware); err != nil {
			return err
		}
		p.f.addPendingIndexes(nil)
		select {
		case <-ctx.Done():
			return nil
		case <-changes:
		case <-tick.C:
		}
	}
}

// sync engages the Registry's clusters that are not engaged, and disengages those that left.
func (p *Provider) sync(ctx context.Context, aware Aware) error {
	// A cluster its source holds back (a ClusterProfile not healthy yet) runs nothing: it is
	// engaged once it starts.
	want := slices.DeleteFunc(p.f.reg.Clusters(), func(name string) bool {
		cs, _ := p.f.reg.ClusterStatus(name)
		return cs.Waiting
	})
	wanted := sets.New(want...)
	p.mu.Lock()
	var gone []*engagement
	for name, e := range p.engaged {
		// A cluster that left, or whose server or credentials changed: its cluster.Cluster
		// goes, and one built with the new ones is engaged.
		if !wanted.Has(name) || p.restartsOf(name) != e.restarts {
			gone = append(gone, e)
			delete(p.engaged, name)
		}
	}
	p.mu.Unlock()
	for _, e := range gone {
		e.cancel()
		<-e.done
	}
	for _, name := range want {
		p.mu.Lock()
		_, ok := p.engaged[name]
		p.mu.Unlock()
		if ok {
			continue
		}
		if err := p.engage(ctx, name, aware); err != nil {
			// One cluster that cannot be built (its credentials cannot make a client) does
			// not stop the others: it is tried again at the next sync.
			p.opts.Logger.Warn("crcache: cannot engage cluster; trying again at the next sync", zap.String("cluster", name), zap.Error(err))
		}
	}
	return nil
}

func (p *Provider) engage(ctx context.Context, name string, aware Aware) error {
	restarts := p.restartsOf(name)
	cfg, ok := p.f.reg.RESTConfig(name)
	if !ok {
		return fmt.Errorf("cluster %q: no REST config", name)
	}
	cl, err := cluster.New(cfg, func(o *cluster.Options) {
		o.Scheme = p.f.scheme
		if p.opts.Cluster != nil {
			p.opts.Cluster(name, o)
		}
		o.NewCache = p.f.NewCacheFunc(name)
	})
	if err != nil {
		return fmt.Errorf("cluster %q: %w", name, err)
	}
	cctx, cancel := context.WithCancel(ctx)
	e := &engagement{cl: cl, restarts: restarts, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(e.done)
		_ = cl.Start(cctx)
	}()
	if aware != nil {
		if err := aware.Engage(cctx, name, cl); err != nil {
			cancel()
			<-e.done
			return fmt.Errorf("cluster %q: engage: %w", name, err)
		}
	}
	p.mu.Lock()
	p.engaged[name] = e
	p.mu.Unlock()
	return nil
}

func (p *Provider) disengageAll() {
	p.mu.Lock()
	all := p.engaged
	p.engaged = map[string]*engagement{}
	p.mu.Unlock()
	for _, e := range all {
		e.cancel()
		<-e.done
	}
}

// Kind is a source of obj's events in the engaged cluster name, as fleet-wide Requests, for a
// controller-runtime controller of Requests (controller.NewTypedUnmanaged[Request]). It stops
// when ctx, the cluster's engagement (Aware.Engage's), ends, or when the controller stops. The
// controller does not wait for it to sync (see boundSource).
func Kind[T client.Object](ctx context.Context, name string, cl cluster.Cluster, obj T, predicates ...predicate.TypedPredicate[T]) source.TypedSource[Request] {
	toRequest := handler.TypedEnqueueRequestsFromMapFunc(func(_ context.Context, o T) []Request {
		return []Request{{Cluster: name, NamespacedName: client.ObjectKeyFromObject(o)}}
	})
	return boundSource{ctx: ctx, src: source.TypedKind[T, Request](cl.GetCache(), obj, toRequest, predicates...)}
}

// boundSource is a source that ends with ctx as well as with its controller. It is not a
// syncing source on purpose: a controller waits for those when it starts (CacheSyncTimeout)
// and fails if one does not sync, so one slow or unreachable cluster would stop the fleet's
// controller. Each cluster's requests come once its own stack has synced.
type boundSource struct {
	ctx context.Context
	src source.TypedSource[Request]
}

func (b boundSource) Start(ctx context.Context, q workqueue.TypedRateLimitingInterface[Request]) error {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(b.ctx, cancel)
	go func() {
		<-ctx.Done()
		stop()
	}()
	return b.src.Start(ctx, q)
}

func (b boundSource) String() string { return fmt.Sprintf("crcache.Kind(%v)", b.src) }
