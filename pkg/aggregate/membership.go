package aggregate

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/cache"
)

// member is one cluster's informer as the Aggregate sees it.
//
// Queries read store. Handlers are fed by one client-go event handler per member (feed), which
// keeps told: for every object, the state every bound handler has been told (delivered, or
// queued for delivery). The feed is registered when the first handler is bound, so that an
// Aggregate nobody handles events of costs client-go no listener; client-go then replays the
// store to it, as to any handler added late. Every event a handler gets is the transition from told to the new
// state, so a handler's story stays consistent whatever client-go drops: client-go discards a
// listener's undelivered notifications when its informer stops, which is why leaving and
// replacing work from told, never from the informer's store.
//
// Invariants:
//   - told changes only under mu, and every change is pushed to every bound handler's queue
//     under the same lock, so a handler bound later (a snapshot of told, then every change) gets
//     each object exactly once.
//   - store is ahead of told or equal to it: a query answered from store reflects every event
//     a handler has been given, so a list taken after an event has its effect.
type member struct {
	cluster  string
	agg      *Aggregate
	informer cache.SharedIndexInformer
	feed     cache.ResourceEventHandlerRegistration // nil until a handler is bound; under mu
	ctx      context.Context                        // ends with the member
	stop     context.CancelFunc
	synced   atomic.Bool // store holds the informer's synced state (and any swap is done)
	degraded atomic.Bool // set by the owner (SetDegraded) while the cluster is failing
	store    atomic.Pointer[storeRef]

	mu       sync.Mutex
	told     map[string]any
	shadow   map[string]any // while replacing another member: this informer's state, not yet told
	bindings map[*Registration]struct{}
	fed      bool // the feed has had the informer's initial list; handlers got evSynced
	frozen   bool // the informer stopped before a feed was registered: told is its final store
	gone     bool
}

type storeRef struct{ cache.Indexer }

// fresh reports whether the member's answers are current: synced, informer running, and not
// marked degraded.
func (m *member) fresh() bool {
	return m.synced.Load() && !m.degraded.Load() && !m.informer.IsStopped()
}

// current is the store queries read.
func (m *member) current() cache.Indexer { return m.store.Load().Indexer }

// feed adapts a member to client-go's handler interface without exporting the methods.
type feed struct{ m *member }

func (f feed) OnAdd(obj any, isInInitialList bool) { f.m.observe(obj, isInInitialList, false) }
func (f feed) OnUpdate(_, newObj any)              { f.m.observe(newObj, false, false) }
func (f feed) OnDelete(obj any)                    { f.m.observe(obj, false, true) }

// join makes inf the member for cluster. inf may be started before or after join.
//
// If cluster is already a member, inf replaces its informer (rotated credentials, a new
// server): the old informer must have stopped, so that its store is final. Handlers are first
// told whatever the old informer stored that client-go had not yet delivered; queries then keep
// reading that store until inf has synced, and handlers are told only what differs. Until then
// nothing of inf reaches them.
func (a *Aggregate) join(cluster string, inf cache.SharedIndexInformer) error {
	if err := ValidateClusterName(cluster); err != nil {
		return err
	}
	defer a.lockLifecycle(cluster)()
	old := a.member(cluster)
	if old != nil && !old.informer.IsStopped() {
		return fmt.Errorf("cluster %q: %s: the member's informer is still running; stop it before replacing it", cluster, a.resource)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &member{cluster: cluster, agg: a, informer: inf, ctx: ctx, stop: cancel, told: map[string]any{}, bindings: map[*Registration]struct{}{}}
	m.store.Store(&storeRef{inf.GetIndexer()})

	// Lock order: m (not yet published) → the member it replaces → a. A feed's callbacks wait
	// for m.mu until m is complete.
	m.mu.Lock()
	defer m.mu.Unlock()
	// The replacement takes over told, the handlers and the final store before it is
	// published, so that no query ever sees its informer's store before it has synced. old
	// stays published meanwhile: its store is final and its feed is gone.
	var inherited map[*Registration]struct{}
	if old != nil {
		var store *storeRef
		m.told, store, inherited = old.retire()
		m.shadow = map[string]any{}
		m.store.Store(store)
	}
	a.mu.Lock()
	// Indexes are installed where AddIndex cannot miss them: it adds the spec, then installs
	// it in the members published by then.
	if err := a.installIndexesLocked(cluster, inf); err != nil {
		a.mu.Unlock()
		cancel()
		if old != nil {
			// old is retired and cannot serve handlers again: the cluster leaves.
			m.bindings = inherited
			m.leaveLocked(false)
			a.mu.Lock()
			delete(a.members, cluster)
			a.resort()
			a.mu.Unlock()
		}
		return fmt.Errorf("cluster %q: %s: indexes: %w", cluster, a.resource, err)
	}
	a.members[cluster] = m
	regs := slices.Clone(a.regs)
	a.resort()
	a.mu.Unlock()

	for _, r := range regs {
		if !r.accepts(cluster) {
			continue
		}
		if _, ok := inherited[r]; ok {
			m.bindings[r] = struct{}{}
			m.ensureFeedLocked()
			continue
		}
		m.bindLocked(r)
	}
	go m.awaitSync()
	a.log.Debug("member joined")
	return nil
}

// retire ends a member that is being replaced. Its informer has stopped, so its store is
// final: handlers are told what it holds beyond told (client-go's undelivered notifications),
// and told, the store and the handlers pass to the replacement.
func (m *member) retire() (told map[string]any, store *storeRef, bindings map[*Registration]struct{}) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.gone = true
	m.stop()
	if m.feed == nil {
		// No feed: either no handler was ever bound (told is empty), or the informer had
		// stopped and told is its final store. Nothing is pending either way.
		told, store, bindings = m.told, m.store.Load(), m.bindings
		m.told, m.shadow, m.bindings = nil, nil, nil
		return told, store, bindings
	}
	_ = m.informer.RemoveEventHandler(m.feed)
	if m.shadow == nil {
		// The store is this informer's. (A member itself replacing another still serves that
		// one's final store, which equals told.)
		final := map[string]any{}
		for _, obj := range m.current().List() {
			if key, ok := objectKey(obj); ok {
				final[key] = obj
			}
		}
		m.becomeLocked(final, false)
	}
	told, store, bindings = m.told, m.store.Load(), m.bindings
	m.told, m.shadow, m.bindings = nil, nil, nil
	return told, store, bindings
}

// observe is the feed: one client-go notification.
func (m *member) observe(obj any, initial, deleted bool) {
	key, ok := objectKey(obj)
	if !ok {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.gone:
	case m.shadow != nil:
		if deleted {
			delete(m.shadow, key)
		} else {
			m.shadow[key] = obj
		}
	case deleted:
		if _, ok := m.told[key]; ok {
			delete(m.told, key)
			m.pushLocked(key, event{kind: evDelete, obj: obj})
		}
	default:
		m.tellLocked(key, obj, initial)
	}
}

// tellLocked makes obj the told state of key and pushes the transition: an add, an update, a
// delete then an add when another object (UID) took the name, or nothing when the version is
// the one already told. Callers hold m.mu.
func (m *member) tellLocked(key string, obj any, initial bool) {
	old, had := m.told[key]
	m.told[key] = obj
	if !had {
		m.pushLocked(key, event{kind: evAdd, obj: obj, initial: initial})
		return
	}
	ou, ov := identity(old)
	nu, nv := identity(obj)
	switch {
	case ou == nu && ov == nv:
	case ou != nu:
		m.pushLocked(key, event{kind: evDelete, obj: cache.DeletedFinalStateUnknown{Key: key, Obj: old}})
		m.pushLocked(key, event{kind: evAdd, obj: obj, initial: initial})
	default:
		m.pushLocked(key, event{kind: evUpdate, old: old, obj: obj})
	}
}

// becomeLocked tells the handlers how view differs from told, then makes view told. Callers
// hold m.mu.
func (m *member) becomeLocked(view map[string]any, initial bool) {
	for key, obj := range view {
		m.tellLocked(key, obj, initial)
	}
	for key, old := range m.told {
		if _, ok := view[key]; !ok {
			m.pushLocked(key, event{kind: evDelete, obj: cache.DeletedFinalStateUnknown{Key: key, Obj: old}})
		}
	}
	m.told = view
}

func (m *member) pushLocked(key string, ev event) {
	ev.at = time.Now() // one clock read for every handler's queue
	for r := range m.bindings {
		r.q.push(m.cluster, key, ev)
	}
}

func identity(obj any) (uid, resourceVersion string) {
	acc, err := meta.Accessor(obj)
	if err != nil {
		return "", ""
	}
	return string(acc.GetUID()), acc.GetResourceVersion()
}

// bindLocked tells r what every bound handler has been told, as initial adds, and binds it.
// Callers hold m.mu.
func (m *member) bindLocked(r *Registration) {
	m.ensureFeedLocked()
	for key, obj := range m.told {
		r.q.push(m.cluster, key, event{kind: evAdd, obj: obj, initial: true})
	}
	m.bindings[r] = struct{}{}
	if m.fed {
		r.q.push(m.cluster, "", event{kind: evSynced, obj: m})
	}
}

// bind binds r unless the member is gone or r is bound already.
func (m *member) bind(r *Registration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.bindings[r]; ok || m.gone {
		return
	}
	m.bindLocked(r)
}

// replay tells r again, as updates, every object it was told of (a resync).
func (m *member) replay(r *Registration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.bindings[r]; !ok || m.gone {
		return
	}
	for key, obj := range m.told {
		r.q.push(m.cluster, key, event{kind: evUpdate, old: obj, obj: obj})
	}
}

func (m *member) unbind(r *Registration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.bindings, r)
}

// ensureFeedLocked registers the member's feed with its informer if it has none yet: client-go
// then replays the informer's store to it as initial adds, and every change after. An informer
// that has stopped takes no handler, but its store is final: told becomes that store, once.
// Callers hold m.mu.
func (m *member) ensureFeedLocked() {
	if m.feed != nil || m.gone || m.frozen {
		return
	}
	reg, err := m.informer.AddEventHandler(feed{m})
	if err != nil {
		m.frozen = true
		if m.shadow == nil { // (a replacement's store is the previous member's, already told)
			for _, obj := range m.current().List() {
				if key, ok := objectKey(obj); ok {
					m.told[key] = obj
				}
			}
		}
		return
	}
	m.feed = reg
	if m.synced.Load() {
		go m.awaitFeed(reg.HasSyncedChecker().Done()) // the store swap is done; only the handlers' evSynced is to come
	}
}

// awaitSync waits for the informer to sync and, if the member has a feed, for the feed to have
// had the initial list. A replacement then swaps the query store to its informer's, which is
// ahead of what the feed has seen, and tells the handlers what differs; then every bound
// handler gets evSynced. It gives up when the informer stops first: the member's replacement or
// Leave ends it.
func (m *member) awaitSync() {
	m.poll(m.informer.HasSyncedChecker().Done(), func() bool {
		stopped := m.informer.IsStopped()
		if !m.informer.HasSynced() || (m.feed != nil && !m.feed.HasSynced()) {
			return stopped
		}
		if m.shadow != nil {
			m.store.Store(&storeRef{m.informer.GetIndexer()})
			view := m.shadow
			m.shadow = nil
			m.becomeLocked(view, true)
		}
		m.synced.Store(true)
		m.markFedLocked()
		return true
	})
}

// awaitFeed waits for a feed registered after the store swap to have had the initial list.
func (m *member) awaitFeed(synced <-chan struct{}) {
	m.poll(synced, func() bool {
		if m.feed.HasSynced() || m.informer.IsStopped() {
			m.markFedLocked()
			return true
		}
		return false
	})
}

// poll runs step under m.mu every poll interval, and at once when wake closes, until it
// reports done or the member ends.
func (m *member) poll(wake <-chan struct{}, step func() bool) {
	t := time.NewTicker(m.agg.poll)
	defer t.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-t.C:
		case <-wake:
			wake = nil
		}
		m.mu.Lock()
		done := m.gone || step()
		m.mu.Unlock()
		if done {
			return
		}
	}
}

// markFedLocked tells every bound handler that it has had the cluster's initial list (or a
// replacement's differences), once the feed has. Callers hold m.mu.
func (m *member) markFedLocked() {
	if m.gone || m.fed || m.feed == nil || !m.feed.HasSynced() {
		return
	}
	m.fed = true
	for r := range m.bindings {
		r.q.push(m.cluster, "", event{kind: evSynced, obj: m})
	}
}

// leave removes cluster. Every handler receives a cache.DeletedFinalStateUnknown for each object
// it was told about, whatever the informer's state; on a handoff, HandoffHandlers receive one
// OnHandoff instead. The caller stops the informer (before or after).
func (a *Aggregate) leave(cluster string, handoff bool) {
	defer a.lockLifecycle(cluster)()
	a.mu.Lock()
	m := a.members[cluster]
	delete(a.members, cluster)
	a.resort()
	a.mu.Unlock()
	if m == nil {
		return
	}
	m.mu.Lock()
	m.leaveLocked(handoff)
	feed := m.feed
	m.mu.Unlock()
	if feed != nil {
		_ = m.informer.RemoveEventHandler(feed)
	}
	a.log.Debug("member left")
}

// leaveLocked tells every bound handler that each object it was told of is gone (on a handoff,
// a HandoffHandler is told that once, with evHandoff), then that the cluster left, and ends the
// member. Callers hold m.mu.
func (m *member) leaveLocked(handoff bool) {
	m.gone = true
	m.stop()
	now := time.Now()
	for key, obj := range m.told {
		del := event{at: now, kind: evDelete, obj: cache.DeletedFinalStateUnknown{Key: key, Obj: obj}}
		for r := range m.bindings {
			if handoff && r.handsOff() {
				continue
			}
			r.q.push(m.cluster, key, del)
		}
	}
	for r := range m.bindings {
		if handoff && r.handsOff() {
			r.q.push(m.cluster, "", event{kind: evHandoff})
		}
		r.q.push(m.cluster, "", event{kind: evLeft})
	}
	m.told, m.shadow, m.bindings = nil, nil, nil
}
