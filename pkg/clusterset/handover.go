package clusterset

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// Handovers: a cluster that moves between live replicas keeps its cache. The replica that
// stops it for a handoff (HandoffSource.Retains) keeps each resource's final store, and the
// resourceVersion it is consistent at, on a shelf (Registry.Shelved); the replica that starts
// it next asks its peers for that state (Registry.SetTaker) and starts its reflector from it:
// the first watch that asks for initial events gets the handed objects as its initial events,
// then the member API server's watch from the handed resourceVersion. Anything that fails
// (no state, a different spec or server, a watch the member refuses, 410 Gone) falls back to
// what a fresh start does, a full list from the member.
//
// The resourceVersion is the store's own (cache.Store.LastStoreSyncResourceVersion, which
// client-go keeps with its AtomicFIFO): the last object or bookmark the store applied, so that
// the objects and the version agree even though the informer stopped with events still
// queued. Without it (the feature off) nothing is shelved.

// ShelfTTL is how long a handed-off cluster's state waits for its next owner, counted from
// when it was shelved or from the shelf's last take, whichever is later: while next owners keep
// taking states (they warm their clusters a few at a time, sharding.maxHandovers, so that a
// move of hundreds of clusters takes them one after another for minutes), every state waits;
// once nobody has taken one for ShelfTTL, those left expire. A state is the cluster as it was
// when handed off, and its next owner replays from there; one the member no longer has the
// version of (410) is listed again, as it would have been without a state.
var ShelfTTL = 30 * time.Second

// ShelfMaxAge bounds how long a state waits however often other states are taken: one that no
// next owner asks for (its key changed in a rollout that changed the configuration) must not
// stay for as long as moves go on. By then its member has most likely compacted past its
// resourceVersion anyway.
var ShelfMaxAge = 5 * time.Minute

// HandedState is one resource of a cluster as a replica's stopped stack left it.
type HandedState struct {
	// Key names the resource and everything that decides what its store holds: the
	// configured spec, the resolved GroupVersionResource and the decoding. A taker uses the
	// state only when its own key is the same.
	Key string
	// ResourceVersion is the member's resourceVersion the objects are consistent at.
	ResourceVersion string
	// Items are the store's objects, shared with nothing that changes them (read-only).
	Items []any
	// Server is the member's API server URL, so that a state is never used against another.
	Server string
}

// Handed is a HandedState as a taker receives it: objects as JSON, decoded by the stack.
type Handed struct {
	Key             string            `json:"key"`
	ResourceVersion string            `json:"resourceVersion"`
	Server          string            `json:"server"`
	Items           []json.RawMessage `json:"items"`
}

// Taker asks the other replicas for the state one left cluster's resource in (key:
// HandedState.Key); ok is false when none has it.
type Taker func(ctx context.Context, cluster, key string) (h *Handed, ok bool, err error)

// SetTaker sets how stacks find handed state. Call it before Start.
func (r *Registry) SetTaker(t Taker) { r.taker = t }

// shelf holds the states of clusters handed off, until taken or expired (ShelfTTL).
type shelf struct {
	mu       sync.Mutex
	entries  map[string]shelfEntry // cluster + "\x00" + key
	lastTake time.Time             // when a state was last taken
	changed  chan struct{}         // closed and replaced whenever entries shrink
	timer    *time.Timer           // expires the entries on time even if nothing touches the shelf
}

type shelfEntry struct {
	state HandedState
	put   time.Time
	// ttl and maxAge are ShelfTTL and ShelfMaxAge as of the put.
	ttl, maxAge time.Duration
}

func shelfKey(cluster, key string) string { return cluster + "\x00" + key }

func (s *shelf) put(cluster string, states []HandedState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.entries == nil {
		s.entries = map[string]shelfEntry{}
	}
	now := time.Now()
	for _, st := range states {
		s.entries[shelfKey(cluster, st.Key)] = shelfEntry{state: st, put: now, ttl: ShelfTTL, maxAge: ShelfMaxAge}
	}
	s.expireLocked()
}

// take removes and returns cluster's state for key.
func (s *shelf) take(cluster, key string) (HandedState, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expireLocked()
	e, ok := s.entries[shelfKey(cluster, key)]
	if ok {
		delete(s.entries, shelfKey(cluster, key))
		s.lastTake = time.Now()
		s.shrunkLocked()
	}
	return e.state, ok
}

// expiresLocked is when e expires: ShelfTTL after its put or the shelf's last take, and no
// later than ShelfMaxAge after its put.
func (s *shelf) expiresLocked(e shelfEntry) time.Time {
	from := e.put
	if s.lastTake.After(from) {
		from = s.lastTake
	}
	at := from.Add(e.ttl)
	if limit := e.put.Add(e.maxAge); limit.Before(at) {
		at = limit
	}
	return at
}

// expireLocked drops the expired entries and sets the timer for the next expiry: the shelf
// holds whole stores, which must not outlive their time because nothing touched it.
func (s *shelf) expireLocked() {
	now := time.Now()
	n := len(s.entries)
	var next time.Time
	for k, e := range s.entries {
		at := s.expiresLocked(e)
		if now.After(at) {
			delete(s.entries, k)
			continue
		}
		if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	if len(s.entries) < n {
		s.shrunkLocked()
	}
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	if !next.IsZero() {
		s.timer = time.AfterFunc(next.Sub(now)+time.Millisecond, func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.expireLocked()
		})
	}
}

func (s *shelf) shrunkLocked() {
	if s.changed != nil {
		close(s.changed)
		s.changed = nil
	}
}

// Shelved returns, once, the state this replica kept of cluster's resource (key) when it
// handed the cluster off.
func (r *Registry) Shelved(cluster, key string) (HandedState, bool) {
	return r.shelf.take(cluster, key)
}

// HasShelved reports whether any state of cluster waits on the shelf now: whether the replica
// that runs the cluster next can take one from this replica.
func (r *Registry) HasShelved(cluster string) bool {
	r.shelf.mu.Lock()
	defer r.shelf.mu.Unlock()
	now, prefix := time.Now(), shelfKey(cluster, "")
	for k, e := range r.shelf.entries {
		if strings.HasPrefix(k, prefix) && !now.After(r.shelf.expiresLocked(e)) {
			return true
		}
	}
	return false
}

// ShelvedStates is how many handed-off states wait on the shelf now.
func (r *Registry) ShelvedStates() int {
	r.shelf.mu.Lock()
	defer r.shelf.mu.Unlock()
	r.shelf.expireLocked()
	return len(r.shelf.entries)
}

// WaitShelfTaken waits until every handed-off state has been taken or has expired, or ctx
// ends; it returns how many are left. A replica shutting down calls it after handing its
// clusters off, so that their next owners can take them before it exits. Since a state waits
// as long as the next owners keep taking (ShelfTTL), ctx should bound the wait.
func (r *Registry) WaitShelfTaken(ctx context.Context) int {
	return r.shelf.wait(ctx, 0)
}

// WaitShelfProgress is WaitShelfTaken that also returns once no state has been taken (nor
// shelved) for idle: the next owners have stopped taking, and those left will list.
func (r *Registry) WaitShelfProgress(ctx context.Context, idle time.Duration) int {
	return r.shelf.wait(ctx, idle)
}

func (s *shelf) wait(ctx context.Context, idle time.Duration) int {
	for {
		s.mu.Lock()
		s.expireLocked()
		n := len(s.entries)
		if n == 0 {
			s.mu.Unlock()
			return 0
		}
		last := s.lastTake
		for _, e := range s.entries {
			if e.put.After(last) {
				last = e.put
			}
		}
		if idle > 0 && time.Since(last) >= idle {
			s.mu.Unlock()
			return n
		}
		if s.changed == nil {
			s.changed = make(chan struct{})
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return n
		case <-time.After(100 * time.Millisecond): // expiry, idleness
		}
	}
}

// stateKey is HandedState.Key for a stack of spec resolved as gvr and decoded as mode.
func stateKey(spec ResourceSpec, gvr string, mode Mode) string {
	t := spec.Transform
	return fmt.Sprintf("%s|ns=%s|l=%s|f=%s|%s|%s|mf=%t|la=%t|dup=%t|func=%t", spec.Name, spec.Namespace, spec.LabelSelector, spec.FieldSelector,
		gvr, mode, t.KeepManagedFields, t.KeepLastApplied, t.KeepDuplicates, t.Func != nil)
}

// shelve keeps the final state of each of the runner's stopped stacks but Secrets', for the
// replica that runs the cluster next. The informers have stopped: their stores are final.
func (r *runner) shelve() {
	if r.reg.taker == nil {
		return // the replicas take no states (Registry.SetTaker): none would take it
	}
	var states []HandedState
	for _, s := range r.stacks {
		s.mu.Lock()
		inf, key, secrets := s.informer, s.key, s.st.Group == "" && s.st.Kind == "Secret"
		s.mu.Unlock()
		if inf == nil || key == "" || secrets || !inf.HasSynced() {
			continue // Secrets are never handed over: their data stays between each replica and its clusters
		}
		store := inf.GetIndexer()
		rv := store.LastStoreSyncResourceVersion()
		if rv == "" {
			continue
		}
		states = append(states, HandedState{Key: key, ResourceVersion: rv, Items: store.List(), Server: r.cfg.Config.Host})
	}
	if len(states) > 0 {
		r.reg.shelf.put(r.cfg.Name, states)
		r.reg.log.Info("handoff: state shelved for the next owner", zap.String("cluster", r.cfg.Name), zap.Int("resources", len(states)))
	}
}

// handedWatch wraps a stack's watch of its member: the first watch that asks for initial
// events is answered from the state another replica handed over, if any, then continues as
// the member's watch from that state's resourceVersion. Later watches, a first one with no
// state to take, and one whose member watch from the handed version cannot be opened, go to
// the member unchanged.
func (s *stack) handedWatch(take func(ctx context.Context) (*Handed, bool), newObject func() runtime.Object,
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error)) func(context.Context, metav1.ListOptions) (watch.Interface, error) {
	var once sync.Once
	return func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		if o.SendInitialEvents == nil || !*o.SendInitialEvents {
			return watchFn(ctx, o)
		}
		var h *Handed
		once.Do(func() {
			if got, ok := take(ctx); ok {
				h = got
			}
		})
		if h == nil {
			return watchFn(ctx, o)
		}
		items := make([]runtime.Object, 0, len(h.Items))
		for i, raw := range h.Items {
			obj := newObject()
			if err := json.Unmarshal(raw, obj); err != nil {
				s.log.Warn("handoff: cannot decode the handed state; listing from the cluster", zap.Int("item", i), zap.Error(err))
				return watchFn(ctx, o)
			}
			items = append(items, obj)
		}
		end := newObject()
		m, err := meta.Accessor(end)
		if err != nil {
			return watchFn(ctx, o)
		}
		m.SetResourceVersion(h.ResourceVersion)
		m.SetAnnotations(map[string]string{metav1.InitialEventsAnnotationKey: "true"})
		from := o
		from.SendInitialEvents, from.ResourceVersionMatch, from.ResourceVersion, from.AllowWatchBookmarks = nil, "", h.ResourceVersion, true
		// The member's watch from the handed resourceVersion first: if it cannot be opened
		// (410: the member no longer has that version, or anything else), the handed state is
		// dropped and the member lists, as at any start.
		inner, err := watchFn(ctx, from)
		if err != nil {
			s.log.Info("handoff: the cluster refuses a watch from the handed resourceVersion; listing from it", zap.String("resourceVersion", h.ResourceVersion), zap.Error(err))
			return watchFn(ctx, o)
		}
		s.log.Info("handoff: starting from the state the previous owner left", zap.Int("objects", len(items)), zap.String("resourceVersion", h.ResourceVersion))
		return newHandedWatch(ctx, items, end, inner), nil
	}
}

// handedStream sends the handed objects as initial events, the bookmark that ends them, then
// relays the member's watch (already open) until it ends or Stop.
type handedStream struct {
	out     chan watch.Event
	stop    chan struct{}
	stopped sync.Once
}

func newHandedWatch(ctx context.Context, items []runtime.Object, end runtime.Object, inner watch.Interface) *handedStream {
	w := &handedStream{out: make(chan watch.Event), stop: make(chan struct{})}
	go func() {
		defer close(w.out)
		defer inner.Stop()
		send := func(ev watch.Event) bool {
			select {
			case w.out <- ev:
				return true
			case <-w.stop:
				return false
			case <-ctx.Done():
				return false
			}
		}
		for _, obj := range items {
			if !send(watch.Event{Type: watch.Added, Object: obj}) {
				return
			}
		}
		if !send(watch.Event{Type: watch.Bookmark, Object: end}) {
			return
		}
		for {
			select {
			case ev, ok := <-inner.ResultChan():
				if !ok || !send(ev) {
					return
				}
			case <-w.stop:
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	return w
}

func (w *handedStream) ResultChan() <-chan watch.Event { return w.out }

func (w *handedStream) Stop() { w.stopped.Do(func() { close(w.stop) }) }
