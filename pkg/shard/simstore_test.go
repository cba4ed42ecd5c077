package shard

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// simStore is an in-process Lease API for the simulation at width: what the Coordinator needs
// of kube-apiserver, and nothing else. It differs from client-go's fake tracker where the
// Coordinator's correctness depends on it:
//   - every write gives a Lease a new resourceVersion, from one counter; an update or a delete
//     whose resourceVersion (or precondition) is not the current one is a Conflict;
//   - a watch opened at a resourceVersion replays every change after it, so the reflector's
//     list-then-watch misses nothing; one older than the kept history is 410 Gone;
//   - a watch never drops or blocks a write: each has an unbounded queue (the tracker's
//     watchers hold 100 events and panic when full, which 30 informers under 10,000 fence
//     writes on 2 cores reach).
//
// It counts successful writes by kind and reports every change of a fence's holder.
type simStore struct {
	mu        sync.Mutex
	rv        int64
	leases    map[string]*coordv1.Lease // by name; stored objects are never mutated
	history   []simEvent                // changes after trimmedTo, in resourceVersion order
	trimmedTo int64
	watches   map[*simWatch]struct{}
	// moved is called, under mu, for each write that changes a fence's holder (a create from
	// "", a delete to "").
	moved func(fence, from, to string)

	peerWrites, fenceWrites atomic.Int64
	// queued counts events pushed to a watch and not yet received from it: the simulation
	// moves its clock only once every replica has seen every write.
	queued atomic.Int64
}

type simEvent struct {
	rv int64
	ev watch.Event
}

// simHistory is how many changes a watch may be behind and still resume.
const simHistory = 200000

func newSimStore() *simStore {
	return &simStore{leases: map[string]*coordv1.Lease{}, watches: map[*simWatch]struct{}{}}
}

// install makes cs's Leases this store's.
func (s *simStore) install(cs *fake.Clientset) {
	cs.PrependReactor("*", "leases", s.react)
	cs.PrependWatchReactor("leases", s.openWatch)
}

func (s *simStore) react(a k8stesting.Action) (bool, runtime.Object, error) {
	gr := coordv1.Resource("leases")
	s.mu.Lock()
	defer s.mu.Unlock()
	switch a := a.(type) {
	case k8stesting.GetActionImpl:
		l, ok := s.leases[a.GetName()]
		if !ok {
			return true, nil, apierrors.NewNotFound(gr, a.GetName())
		}
		return true, l.DeepCopy(), nil
	case k8stesting.ListActionImpl:
		sel := a.GetListRestrictions().Labels
		list := &coordv1.LeaseList{ListMeta: metav1.ListMeta{ResourceVersion: strconv.FormatInt(s.rv, 10)}}
		for _, l := range s.leases {
			if sel == nil || sel.Matches(labels.Set(l.Labels)) {
				list.Items = append(list.Items, *l.DeepCopy())
			}
		}
		return true, list, nil
	case k8stesting.CreateActionImpl:
		l := a.GetObject().(*coordv1.Lease).DeepCopy()
		if _, ok := s.leases[l.Name]; ok {
			return true, nil, apierrors.NewAlreadyExists(gr, l.Name)
		}
		s.write(watch.Added, nil, l)
		return true, l.DeepCopy(), nil
	case k8stesting.UpdateActionImpl:
		l := a.GetObject().(*coordv1.Lease).DeepCopy()
		cur, ok := s.leases[l.Name]
		if !ok {
			return true, nil, apierrors.NewNotFound(gr, l.Name)
		}
		if l.ResourceVersion != "" && l.ResourceVersion != cur.ResourceVersion {
			return true, nil, apierrors.NewConflict(gr, l.Name, fmt.Errorf("the object has been modified"))
		}
		s.write(watch.Modified, cur, l)
		return true, l.DeepCopy(), nil
	case k8stesting.DeleteActionImpl:
		cur, ok := s.leases[a.GetName()]
		if !ok {
			return true, nil, apierrors.NewNotFound(gr, a.GetName())
		}
		if p := a.DeleteOptions.Preconditions; p != nil && p.ResourceVersion != nil && *p.ResourceVersion != cur.ResourceVersion {
			return true, nil, apierrors.NewConflict(gr, a.GetName(), fmt.Errorf("the object has been modified"))
		}
		s.write(watch.Deleted, cur, nil)
		return true, nil, nil
	}
	return true, nil, fmt.Errorf("simulated Lease store: %s is not supported", a.GetVerb())
}

// write records one change, under mu: old is the Lease before (nil for a create), l after (nil
// for a delete).
func (s *simStore) write(t watch.EventType, old, l *coordv1.Lease) {
	s.rv++
	rv := strconv.FormatInt(s.rv, 10)
	obj := l
	if t == watch.Deleted {
		obj = old.DeepCopy()
		obj.ResourceVersion = rv
		delete(s.leases, old.Name)
	} else {
		l.ResourceVersion = rv
		s.leases[l.Name] = l
	}
	if leaseKind(obj) == kindFence {
		s.fenceWrites.Add(1)
		if from, to := holderOf(old), holderOf(l); from != to && s.moved != nil {
			s.moved(obj.Name, from, to)
		}
	} else {
		s.peerWrites.Add(1)
	}
	ev := watch.Event{Type: t, Object: obj}
	s.history = append(s.history, simEvent{rv: s.rv, ev: ev})
	if len(s.history) > simHistory {
		drop := len(s.history) - simHistory/2
		s.trimmedTo = s.history[drop-1].rv
		s.history = append([]simEvent(nil), s.history[drop:]...)
	}
	for w := range s.watches {
		w.offer(ev)
	}
}

func (s *simStore) openWatch(a k8stesting.Action) (bool, watch.Interface, error) {
	r := a.(k8stesting.WatchActionImpl).GetWatchRestrictions()
	s.mu.Lock()
	defer s.mu.Unlock()
	// A watch resumes after the resourceVersion it names, "0" included: the reflector watches
	// from its list's, which is "0" while the store is empty, and a Lease created between that
	// list and this watch must not be lost. Only "" starts from now.
	from := s.rv
	if r.ResourceVersion != "" {
		v, err := strconv.ParseInt(r.ResourceVersion, 10, 64)
		if err != nil {
			return true, nil, apierrors.NewBadRequest(fmt.Sprintf("resourceVersion %q: %v", r.ResourceVersion, err))
		}
		if v < s.trimmedTo {
			return true, nil, apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%d)", v, s.trimmedTo))
		}
		from = v
	}
	w := &simWatch{store: s, sel: r.Labels, ch: make(chan watch.Event), more: make(chan struct{}, 1), stop: make(chan struct{})}
	for _, e := range s.history {
		if e.rv > from {
			w.offer(e.ev)
		}
	}
	s.watches[w] = struct{}{}
	go w.run()
	return true, w, nil
}

// simWatch is one open watch: an unbounded queue drained into ResultChan by its goroutine.
type simWatch struct {
	store *simStore
	sel   labels.Selector
	ch    chan watch.Event
	more  chan struct{} // buffered 1: the queue grew
	stop  chan struct{}
	once  sync.Once

	mu    sync.Mutex
	queue []watch.Event
}

// offer queues ev if the watch selects it.
func (w *simWatch) offer(ev watch.Event) {
	if l, ok := ev.Object.(*coordv1.Lease); ok && w.sel != nil && !w.sel.Matches(labels.Set(l.Labels)) {
		return
	}
	w.store.queued.Add(1)
	w.mu.Lock()
	w.queue = append(w.queue, ev)
	w.mu.Unlock()
	select {
	case w.more <- struct{}{}:
	default:
	}
}

func (w *simWatch) run() {
	defer close(w.ch)
	for {
		w.mu.Lock()
		q := w.queue
		w.queue = nil
		w.mu.Unlock()
		for i, ev := range q {
			select {
			case w.ch <- ev:
				w.store.queued.Add(-1)
			case <-w.stop:
				w.store.queued.Add(-int64(len(q) - i))
				w.drop()
				return
			}
		}
		select {
		case <-w.more:
		case <-w.stop:
			w.drop()
			return
		}
	}
}

// drop forgets what is still queued once the watch stopped.
func (w *simWatch) drop() {
	w.mu.Lock()
	w.store.queued.Add(-int64(len(w.queue)))
	w.queue = nil
	w.mu.Unlock()
}

func (w *simWatch) Stop() {
	w.once.Do(func() {
		w.store.mu.Lock()
		delete(w.store.watches, w)
		w.store.mu.Unlock()
		close(w.stop)
	})
}

func (w *simWatch) ResultChan() <-chan watch.Event { return w.ch }

// holders is every fence's holder: cluster → replica ("" for a free fence).
func (s *simStore) holders() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]string, len(s.leases))
	for _, l := range s.leases {
		if leaseKind(l) == kindFence {
			out[fenceCluster(l)] = holderOf(l)
		}
	}
	return out
}

// peerRVs is every peer Lease's resourceVersion, by replica ID.
func (s *simStore) peerRVs() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]string{}
	for _, l := range s.leases {
		if leaseKind(l) == kindPeer {
			out[peerID(l)] = l.ResourceVersion
		}
	}
	return out
}
