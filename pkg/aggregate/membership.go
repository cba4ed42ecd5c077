package aggregate

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/tools/cache"
)

// member is one cluster's informer as the Aggregate sees it.
//
// Queries read `store`: while a replacement informer syncs it is still the previous informer's
// store, then the new informer's. Handlers are wired per (handler, member) by a binding, which
// is a client-go event handler of its own: client-go then guarantees that a handler added late
// gets the store's contents once and every later change exactly once.
type member struct {
	cluster  string
	agg      *Aggregate
	informer cache.SharedIndexInformer
	cancel   context.CancelFunc
	synced   atomic.Bool
	degraded atomic.Bool // set by the owner (SetDegraded) while the cluster is failing

	mu       sync.Mutex
	store    cache.Indexer
	bindings map[*Registration]*binding
	gone     bool
}

// binding forwards one member's events to one handler's queue.
//
// Invariant: the handler has been told exactly the state of `prev` (when set) or of the
// informer's store, plus the events forwarded since. While prev is set (a replacement informer
// is delivering its initial list) events are judged against prev, so that unchanged objects
// produce nothing; once client-go reports the binding synced, objects of prev the new informer
// never mentioned are deleted and prev is dropped.
type binding struct {
	m   *member
	r   *Registration
	reg cache.ResourceEventHandlerRegistration

	mu   sync.Mutex // client-go calls one handler sequentially; this orders them with promote/close
	prev cache.Indexer
	seen map[string]struct{}
	done bool
}

// Join makes inf the member for cluster. inf may be started before or after Join. If cluster is
// already a member, inf replaces its informer: queries keep reading the old store until inf has
// synced, and handlers then see only what differs. The caller stops the old informer.
func (a *Aggregate) Join(cluster string, inf cache.SharedIndexInformer) error {
	if err := ValidateClusterName(cluster); err != nil {
		return err
	}
	if err := a.installIndexes(cluster, inf); err != nil {
		return fmt.Errorf("cluster %q: %s: indexes: %w", cluster, a.resource, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &member{cluster: cluster, agg: a, informer: inf, cancel: cancel, store: inf.GetIndexer(), bindings: map[*Registration]*binding{}}

	a.mu.Lock()
	old := a.members[cluster]
	regs := slices.Clone(a.regs)
	a.members[cluster] = m
	a.resort()
	a.mu.Unlock()

	var prev cache.Indexer
	if old != nil {
		prev = old.retire()
		m.store = prev
	}
	m.mu.Lock()
	for _, r := range regs {
		if err := m.bindLocked(r, prev); err != nil {
			m.mu.Unlock()
			a.Leave(cluster)
			return fmt.Errorf("cluster %q: %s: %w", cluster, a.resource, err)
		}
	}
	m.mu.Unlock()
	go m.awaitSync(ctx)
	a.log.Debug("member joined")
	return nil
}

// retire detaches a replaced member's handlers and returns the store they were told about.
func (m *member) retire() cache.Indexer {
	m.mu.Lock()
	m.gone = true
	m.cancel()
	bs := m.bindings
	m.bindings = nil
	store := m.store
	m.mu.Unlock()
	for _, b := range bs {
		b.close()
	}
	return store
}

// bindLocked wires r to m. With prev, the binding starts in the shadow phase. Callers hold m.mu.
func (m *member) bindLocked(r *Registration, prev cache.Indexer) error {
	b := &binding{m: m, r: r, prev: prev}
	if prev != nil {
		b.seen = map[string]struct{}{}
	}
	reg, err := m.informer.AddEventHandler(b)
	if err != nil {
		return err
	}
	b.reg = reg
	m.bindings[r] = b
	go b.awaitSync(m.agg.poll)
	return nil
}

// close stops forwarding; client-go may still be inside a call, which then finds done set.
func (b *binding) close() {
	_ = b.m.informer.RemoveEventHandler(b.reg)
	b.mu.Lock()
	b.done = true
	b.mu.Unlock()
}

func (b *binding) awaitSync(poll time.Duration) {
	t := time.NewTicker(poll)
	defer t.Stop()
	for !b.reg.HasSynced() {
		<-t.C
		b.mu.Lock()
		done := b.done
		b.mu.Unlock()
		if done {
			return
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return
	}
	if b.prev != nil {
		for _, key := range b.prev.ListKeys() {
			if _, ok := b.seen[key]; ok {
				continue
			}
			if obj, ok, _ := b.prev.GetByKey(key); ok {
				b.r.q.push(b.m.cluster, key, event{kind: evDelete, obj: cache.DeletedFinalStateUnknown{Key: key, Obj: obj}})
			}
		}
		b.prev, b.seen = nil, nil
	}
	b.r.q.push(b.m.cluster, markerKey, event{kind: evSynced})
}

// enter locks b for one event on obj and records it as seen; ok is false (and b unlocked) when
// the event is to be dropped. Callers unlock b.
func (b *binding) enter(obj any) (key string, ok bool) {
	key, ok = objectKey(obj)
	if !ok {
		return "", false
	}
	b.mu.Lock()
	if b.done {
		b.mu.Unlock()
		return "", false
	}
	if b.seen != nil {
		b.seen[key] = struct{}{}
	}
	return key, true
}

func (b *binding) OnAdd(obj any, isInInitialList bool) {
	key, ok := b.enter(obj)
	if !ok {
		return
	}
	defer b.mu.Unlock()
	if b.prev != nil {
		if old, ok, _ := b.prev.GetByKey(key); ok {
			if resourceVersion(old) != resourceVersion(obj) {
				b.r.q.push(b.m.cluster, key, event{kind: evUpdate, old: old, obj: obj})
			}
			return // unchanged across the informer swap: nothing to say
		}
	}
	b.r.q.push(b.m.cluster, key, event{kind: evAdd, obj: obj, initial: isInInitialList})
}

func (b *binding) OnUpdate(oldObj, newObj any) {
	if key, ok := b.enter(newObj); ok {
		b.r.q.push(b.m.cluster, key, event{kind: evUpdate, old: oldObj, obj: newObj})
		b.mu.Unlock()
	}
}

func (b *binding) OnDelete(obj any) {
	if key, ok := b.enter(obj); ok {
		b.r.q.push(b.m.cluster, key, event{kind: evDelete, obj: obj})
		b.mu.Unlock()
	}
}

// Leave removes cluster. Every handler receives a cache.DeletedFinalStateUnknown for each object
// it was told about. The caller stops the informer.
func (a *Aggregate) Leave(cluster string) {
	a.mu.Lock()
	m := a.members[cluster]
	delete(a.members, cluster)
	a.resort()
	a.mu.Unlock()
	if m == nil {
		return
	}
	m.mu.Lock()
	m.gone = true
	m.cancel()
	bs := m.bindings
	m.bindings = nil
	m.mu.Unlock()
	for _, b := range bs {
		b.close()
		b.mu.Lock()
		known := b.prev
		b.mu.Unlock()
		if known == nil {
			known = m.informer.GetIndexer()
		}
		for _, key := range known.ListKeys() {
			if obj, ok, _ := known.GetByKey(key); ok {
				b.r.q.push(cluster, key, event{kind: evDelete, obj: cache.DeletedFinalStateUnknown{Key: key, Obj: obj}})
			}
		}
		b.r.leave(cluster)
	}
	a.log.Debug("member left")
}

// awaitSync swaps the query store to the informer's once it has synced.
func (m *member) awaitSync(ctx context.Context) {
	t := time.NewTicker(m.agg.poll)
	defer t.Stop()
	for !m.informer.HasSynced() {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.gone {
		return
	}
	m.store = m.informer.GetIndexer()
	m.synced.Store(true)
}
