package clusterset

import (
	"context"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// SyncProgress is how far a cluster × resource is through its latest initial list or relist.
type SyncProgress struct {
	// Loaded is how many objects the API server has sent for the list so far.
	Loaded int64
	// Expected is the list's total as the API server reported it (remainingItemCount plus what
	// was sent), or 0 when it did not say: a label or field selector, or a server that does not
	// count.
	Expected int64
	// Listing is true while the list is under way, false once its last object has arrived.
	Listing bool
}

// progress counts what a reflector's lists bring. A list is either paged (each page is one call
// of the ListerWatcher's List) or streamed (a watch with sendInitialEvents, whose initial
// objects end with a bookmark annotated k8s.io/initial-events-end). Each new list resets the
// count. Counters are atomic because the reflector and status readers run concurrently.
type progress struct {
	loaded, expected atomic.Int64
	listing          atomic.Bool
	gen              atomic.Int64 // bumped by every new list, so that a late estimate of an old list is dropped

	// streamed holds the objects of a streamed list's initial events, from the moment they
	// are relayed until client-go has transformed them twice: its reflector transforms them as
	// it puts them in a temporary store, and its queue transforms the store's contents again
	// when it replaces its own. The value is true once the first transform has run. Emptied at
	// each new list.
	mu       sync.Mutex
	streamed map[any]bool
}

// once wraps t so that it runs once per object: the second call client-go makes on an object
// of a streamed list returns the object as it is. Without this, the transform's cost is paid
// twice for every object of an initial sync, and a user transform would run on objects whose
// parts are already shared.
func (p *progress) once(t cache.TransformFunc) cache.TransformFunc {
	return func(obj any) (any, error) {
		p.mu.Lock()
		done, ok := p.streamed[obj]
		switch {
		case ok && done:
			delete(p.streamed, obj)
		case ok:
			p.streamed[obj] = true
		}
		p.mu.Unlock()
		if done {
			return obj, nil
		}
		return t(obj)
	}
}

// streamedObject records obj as an initial event of a streamed list.
func (p *progress) streamedObject(obj any) {
	p.mu.Lock()
	if p.streamed == nil {
		p.streamed = map[any]bool{}
	}
	p.streamed[obj] = false
	p.mu.Unlock()
}

func (p *progress) snapshot() SyncProgress {
	return SyncProgress{Loaded: p.loaded.Load(), Expected: p.expected.Load(), Listing: p.listing.Load()}
}

func (p *progress) begin() int64 {
	p.mu.Lock()
	p.streamed = nil
	p.mu.Unlock()
	g := p.gen.Add(1)
	p.loaded.Store(0)
	p.expected.Store(0)
	p.listing.Store(true)
	return g
}

// page records one page of a paged list, which began with the request for its first page.
func (p *progress) page(list runtime.Object) {
	n := int64(meta.LenList(list))
	loaded := p.loaded.Add(n)
	lm, err := meta.ListAccessor(list)
	if err != nil {
		return
	}
	if rem := lm.GetRemainingItemCount(); rem != nil {
		p.expected.Store(loaded + *rem)
	}
	if lm.GetContinue() == "" {
		// The last page: the list's total is what arrived.
		p.expected.Store(loaded)
		p.listing.Store(false)
	}
}

// estimate records the total a one-object list reported while a streamed list runs (watch-list
// carries no count of its own). It is dropped when another list has begun since gen, or when
// the stream finished first.
func (p *progress) estimate(gen int64, list runtime.Object) {
	lm, err := meta.ListAccessor(list)
	if err != nil {
		return
	}
	rem := lm.GetRemainingItemCount()
	if rem == nil && lm.GetContinue() != "" {
		return // more objects, and no count: unknown
	}
	total := int64(meta.LenList(list))
	if rem != nil {
		total += *rem
	}
	if p.gen.Load() == gen && p.listing.Load() {
		p.expected.Store(total)
	}
}

// progressListWatch wraps the list and watch functions of a stack so that p follows each list.
// A streamed list also sends one list request with limit 1 at its start, whose
// remainingItemCount gives the expected total; it costs the API server one object. The first
// streamed list uses estimated() instead, when that is not nil (the one its plan was made on).
func progressListWatch(p *progress,
	list func(context.Context, metav1.ListOptions) (runtime.Object, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error),
	estimated func() runtime.Object) (
	func(context.Context, metav1.ListOptions) (runtime.Object, error),
	func(context.Context, metav1.ListOptions) (watch.Interface, error)) {
	var firstEstimate sync.Once
	pagedList := func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		if o.Continue == "" {
			p.begin()
		}
		out, err := list(ctx, o)
		if err != nil {
			p.listing.Store(false) // the reflector starts the list again
			return nil, err
		}
		p.page(out)
		return out, nil
	}
	streamed := func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		if o.SendInitialEvents == nil || !*o.SendInitialEvents {
			return watchFn(ctx, o)
		}
		gen := p.begin()
		w, err := watchFn(ctx, o)
		if err != nil {
			p.listing.Store(false)
			return nil, err
		}
		var known runtime.Object
		firstEstimate.Do(func() {
			if estimated != nil {
				known = estimated()
			}
		})
		if known != nil {
			p.estimate(gen, known)
			return newCountingWatch(w, p), nil
		}
		go func() {
			est := metav1.ListOptions{LabelSelector: o.LabelSelector, FieldSelector: o.FieldSelector, Limit: 1}
			if out, err := list(ctx, est); err == nil {
				p.estimate(gen, out)
			}
		}()
		return newCountingWatch(w, p), nil
	}
	return pagedList, streamed
}

// countingWatch relays a watch and counts the objects of its initial events, up to the bookmark
// that ends them. Its relay goroutine ends when the underlying watch ends or Stop is called.
type countingWatch struct {
	inner    watch.Interface
	out      chan watch.Event
	stopped  chan struct{}
	stopOnce sync.Once
}

func newCountingWatch(inner watch.Interface, p *progress) *countingWatch {
	w := &countingWatch{inner: inner, out: make(chan watch.Event), stopped: make(chan struct{})}
	go w.relay(p)
	return w
}

func (w *countingWatch) relay(p *progress) {
	defer close(w.out)
	initial := true
	for ev := range w.inner.ResultChan() {
		if initial {
			switch ev.Type {
			case watch.Added:
				p.loaded.Add(1)
				if _, isMeta := ev.Object.(metav1.Object); isMeta {
					p.streamedObject(ev.Object)
				}
			case watch.Bookmark:
				if m, err := meta.Accessor(ev.Object); err == nil && m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true" {
					initial = false
					p.expected.Store(p.loaded.Load())
					p.listing.Store(false)
				}
			case watch.Error:
				initial = false
				p.listing.Store(false)
			}
		}
		select {
		case w.out <- ev:
		case <-w.stopped:
			return
		}
	}
}

func (w *countingWatch) Stop() {
	w.stopOnce.Do(func() { close(w.stopped) })
	w.inner.Stop()
}

func (w *countingWatch) ResultChan() <-chan watch.Event { return w.out }
