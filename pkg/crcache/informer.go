package crcache

import (
	"errors"
	"fmt"
	"time"

	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/multicache/multicache/pkg/aggregate"
)

// informer is cache.Informer for one cluster and resource: a view of the Registry's stack,
// whose handlers are the aggregate's, bound to the cluster (aggregate.HandlerOptions.Cluster).
type informer struct {
	c *Cache
	t target
}

var _ cache.Informer = (*informer)(nil)

// AddEventHandler adds h: it is told of the cluster's objects already held, as adds in the
// initial list, then of every change, as an informer of that cluster would tell it.
func (i *informer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.add(h, aggregate.HandlerOptions{})
}

// AddEventHandlerWithResyncPeriod is AddEventHandler with resyncs, every period (at least a
// second), as client-go's.
func (i *informer) AddEventHandlerWithResyncPeriod(h toolscache.ResourceEventHandler, period time.Duration) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.add(h, aggregate.HandlerOptions{ResyncPeriod: period})
}

// AddEventHandlerWithOptions is AddEventHandler with client-go's options: a resync period.
// Its Logger is not used (the Registry's logs).
func (i *informer) AddEventHandlerWithOptions(h toolscache.ResourceEventHandler, opts toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	var ho aggregate.HandlerOptions
	if opts.ResyncPeriod != nil {
		ho.ResyncPeriod = *opts.ResyncPeriod
	}
	return i.add(h, ho)
}

func (i *informer) add(h toolscache.ResourceEventHandler, opts aggregate.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	if h == nil {
		return nil, errors.New("crcache: AddEventHandler: nil handler")
	}
	opts.Cluster = i.c.cluster
	// Under the Cache's lock, so that a Cache that stops meanwhile removes it too.
	i.c.mu.Lock()
	defer i.c.mu.Unlock()
	if i.c.stopped {
		return nil, fmt.Errorf("crcache: cluster %q: the cache has stopped", i.c.cluster)
	}
	reg, err := i.t.agg.AddEventHandlerWithOptions(clusterHandler{h}, opts)
	if err != nil {
		return nil, fmt.Errorf("crcache: cluster %q: %w", i.c.cluster, err)
	}
	i.c.handlers[i.t.resource] = append(i.c.handlers[i.t.resource], reg)
	return registration{reg}, nil
}

// RemoveEventHandler removes a handler this informer added.
func (i *informer) RemoveEventHandler(handle toolscache.ResourceEventHandlerRegistration) error {
	r, ok := handle.(registration)
	if !ok {
		return fmt.Errorf("crcache: RemoveEventHandler: %T was not added by this informer", handle)
	}
	r.Remove()
	i.c.mu.Lock()
	defer i.c.mu.Unlock()
	regs := i.c.handlers[i.t.resource]
	for j, x := range regs {
		if x == r.Registration {
			i.c.handlers[i.t.resource] = append(regs[:j:j], regs[j+1:]...)
			break
		}
	}
	return nil
}

// AddIndexers adds indexes to the resource in every cluster of the fleet (the stack is
// shared): their names must not be taken.
func (i *informer) AddIndexers(indexers toolscache.Indexers) error {
	for name, fn := range indexers {
		if err := i.t.agg.AddIndex(aggregate.IndexSpec{Name: name, Func: fn}); err != nil {
			return fmt.Errorf("crcache: %s: %w", i.t.resource, err)
		}
	}
	return nil
}

// HasSynced reports whether the cluster's store of the resource has synced once
// (aggregate.HasList).
func (i *informer) HasSynced() bool { return i.t.agg.HasList(i.c.cluster) }

// HasSyncedChecker is HasSynced as a DoneChecker.
func (i *informer) HasSyncedChecker() toolscache.DoneChecker {
	return newPollChecker(fmt.Sprintf("%s in cluster %s", i.t.resource, i.c.cluster), i.HasSynced, i.IsStopped, i.c.f.poll)
}

// IsStopped reports whether the cluster is no longer in the fleet.
func (i *informer) IsStopped() bool {
	_, ok := i.t.agg.Cluster(i.c.cluster)
	return !ok
}

// clusterHandler adapts a client-go handler to the aggregate's, whose calls name the cluster (always
// the informer's: the registration is bound to it).
type clusterHandler struct {
	h toolscache.ResourceEventHandler
}

func (a clusterHandler) OnAdd(_ string, obj any, initial bool) { a.h.OnAdd(obj, initial) }
func (a clusterHandler) OnUpdate(_ string, oldObj, newObj any) { a.h.OnUpdate(oldObj, newObj) }
func (a clusterHandler) OnDelete(_ string, obj any)            { a.h.OnDelete(obj) }

// registration is a handler's registration, as client-go's: HasSynced once the handler has had
// the cluster's initial list.
type registration struct{ *aggregate.Registration }

func (r registration) HasSyncedChecker() toolscache.DoneChecker {
	removed := func() bool {
		select {
		case <-r.Done():
			return true
		default:
			return false
		}
	}
	return newPollChecker("a handler's initial list", r.HasSynced, removed, 50*time.Millisecond)
}

// pollChecker is a DoneChecker over a condition that is polled: done is closed once it holds.
// Polling stops, done left open, once abandoned says the condition never will (the cluster
// left, the handler was removed).
type pollChecker struct {
	name string
	done chan struct{}
}

func newPollChecker(name string, cond, abandoned func() bool, every time.Duration) *pollChecker {
	p := &pollChecker{name: name, done: make(chan struct{})}
	go func() {
		for !cond() {
			if abandoned() {
				return
			}
			time.Sleep(every)
		}
		close(p.done)
	}()
	return p
}

func (p *pollChecker) Name() string          { return p.name }
func (p *pollChecker) Done() <-chan struct{} { return p.done }
