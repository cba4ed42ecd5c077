package informer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// Options configure New. ListerWatcher and ObjectType are required.
type Options struct {
	// ListerWatcher lists and watches the objects; it keeps whatever optional interfaces it has
	// (watch-list semantics, for example), as client-go's reflector reads them.
	ListerWatcher cache.ListerWatcher
	// ObjectType is an object of the type the informer receives.
	ObjectType runtime.Object
	// Indexers are the store's indexes. More can be added later with AddIndexers.
	Indexers cache.Indexers
	// Transform runs on every object before it is stored and handed to the handlers, as
	// SharedIndexInformer.SetTransform's does. SetTransform may also set it before Run.
	Transform cache.TransformFunc
	// Logger, if set, is the FIFO's and (through Run's context) the reflector's, so that
	// their lines say which cluster and resource they are about.
	Logger *klog.Logger
}

// Informer is a cache.SharedIndexInformer whose handlers run synchronously on its processing
// goroutine (see the package documentation).
//
// Handlers differ from client-go's in three ways:
//   - a handler's call delays every later event of the informer, for every handler;
//   - a handler added after Run first gets the store's objects as initial adds, while the
//     informer waits: before its first event, or on a goroutine of its own if that comes first.
//     The change being handed out at that moment is in the store already, so the handler is
//     then told it again, at the version it was replayed (an add or update of that version, or
//     a delete of an object it never got). Per object, what it is told never goes back;
//   - there is no resync: a handler with a resync period, and SetWatchErrorHandler, are
//     refused. List and watch errors are the ListerWatcher's to see.
//
// Calls of all handlers are sequential: no two run at once.
type Informer struct {
	controller cache.Controller
	indexer    cache.Indexer

	// deliver is held for every handler call, by the processing goroutine or a replay: calls
	// never overlap, and a replay sees the store while no event is being handed out.
	deliver sync.Mutex
	// handlers is replaced, never changed in place, under mu; deliveries read it without mu.
	handlers atomic.Pointer[[]*Registration]

	synced <-chan struct{} // the FIFO's: closed once the initial list has been processed
	logger *klog.Logger

	mu        sync.Mutex
	transform cache.TransformFunc // read once per object; set before Run
	started   bool
	stopped   bool
	done      chan struct{} // closed once Run has returned
}

// New builds the informer. Nothing runs until Run.
func New(opts Options) (*Informer, error) {
	if opts.ListerWatcher == nil {
		return nil, errors.New("informer: Options.ListerWatcher is required")
	}
	if opts.ObjectType == nil {
		return nil, errors.New("informer: Options.ObjectType is required")
	}
	i := &Informer{transform: opts.Transform, logger: opts.Logger, done: make(chan struct{})}
	i.handlers.Store(&[]*Registration{})
	indexers := opts.Indexers
	if indexers == nil {
		indexers = cache.Indexers{} // NewInformerWithOptions then builds an Indexer, not a Store
	}
	store, controller := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: opts.ListerWatcher,
		ObjectType:    opts.ObjectType,
		Handler:       dispatch{i},
		Indexers:      indexers,
		Transform:     i.transformObject,
		Logger:        opts.Logger,
	})
	indexer, ok := store.(cache.Indexer)
	if !ok {
		return nil, fmt.Errorf("informer: client-go built a %T, not an Indexer", store)
	}
	i.indexer, i.controller = indexer, controller
	i.synced = controller.HasSyncedChecker().Done()
	return i, nil
}

// transformObject applies the transform in force. Run fixes it: SetTransform refuses once the
// informer has started, so the field no longer changes when objects arrive.
func (i *Informer) transformObject(obj any) (any, error) {
	if i.transform == nil {
		return obj, nil
	}
	return i.transform(obj)
}

// dispatch is the single handler client-go's informer calls; it calls every registered one.
type dispatch struct{ i *Informer }

func (d dispatch) OnAdd(obj any, initial bool) {
	d.i.deliver.Lock()
	defer d.i.deliver.Unlock()
	for _, r := range *d.i.handlers.Load() {
		r.replayLocked()
		r.h.OnAdd(obj, initial)
	}
}

func (d dispatch) OnUpdate(oldObj, newObj any) {
	d.i.deliver.Lock()
	defer d.i.deliver.Unlock()
	for _, r := range *d.i.handlers.Load() {
		r.replayLocked()
		r.h.OnUpdate(oldObj, newObj)
	}
}

func (d dispatch) OnDelete(obj any) {
	d.i.deliver.Lock()
	defer d.i.deliver.Unlock()
	for _, r := range *d.i.handlers.Load() {
		r.replayLocked()
		r.h.OnDelete(obj)
	}
}

// Registration is a handler added to an Informer.
type Registration struct {
	i        *Informer
	h        cache.ResourceEventHandler
	pending  atomic.Bool   // added after Run and not yet replayed the store; changes under deliver
	replayed chan struct{} // closed once the handler has had the store's objects, or needs none
	removed  atomic.Bool

	syncOnce sync.Once
	synced   chan struct{} // for HasSyncedChecker; made on first use
}

// HasSynced is true once the informer has synced and the handler has had every object of the
// initial list (a late handler: the store's objects).
func (r *Registration) HasSynced() bool {
	select {
	case <-r.replayed:
		return r.i.HasSynced()
	default:
		return false
	}
}

// HasSyncedChecker is HasSynced as a channel.
func (r *Registration) HasSyncedChecker() cache.DoneChecker { return registrationDone{r} }

type registrationDone struct{ r *Registration }

func (d registrationDone) Name() string { return fmt.Sprintf("informer handler %T", d.r.h) }

// Done is closed once the registration has synced. Its goroutine also ends when the informer
// stops first; the channel then stays open, as the informer never synced.
func (d registrationDone) Done() <-chan struct{} {
	r := d.r
	r.syncOnce.Do(func() {
		r.synced = make(chan struct{})
		go func() {
			select {
			case <-r.replayed:
			case <-r.i.done:
				return
			}
			select {
			case <-r.i.synced:
				close(r.synced)
			case <-r.i.done:
				if r.i.HasSynced() {
					close(r.synced)
				}
			}
		}()
	})
	return r.synced
}

// AddEventHandler adds h. A handler added before Run gets the initial list as it arrives; one
// added later first gets the store's objects (see Informer).
func (i *Informer) AddEventHandler(h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	return i.AddEventHandlerWithOptions(h, cache.HandlerOptions{})
}

// AddEventHandlerWithResyncPeriod refuses a resync period; with none it is AddEventHandler.
func (i *Informer) AddEventHandlerWithResyncPeriod(h cache.ResourceEventHandler, resync time.Duration) (cache.ResourceEventHandlerRegistration, error) {
	return i.AddEventHandlerWithOptions(h, cache.HandlerOptions{ResyncPeriod: &resync})
}

// AddEventHandlerWithOptions is AddEventHandler; options.ResyncPeriod must be unset or zero.
func (i *Informer) AddEventHandlerWithOptions(h cache.ResourceEventHandler, options cache.HandlerOptions) (cache.ResourceEventHandlerRegistration, error) {
	if h == nil {
		return nil, errors.New("informer: nil handler")
	}
	if options.ResyncPeriod != nil && *options.ResyncPeriod != 0 {
		return nil, fmt.Errorf("informer: resync period %s: this informer does not resync", *options.ResyncPeriod)
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.stopped {
		return nil, fmt.Errorf("informer: handler %T not added: the informer has stopped", h)
	}
	r := &Registration{i: i, h: h, replayed: make(chan struct{})}
	if !i.started {
		close(r.replayed) // the initial list comes as it arrives
	} else {
		r.pending.Store(true)
	}
	i.setHandlersLocked(append(slices.Clone(*i.handlers.Load()), r))
	if r.pending.Load() {
		// The replay cannot run here: the caller may hold a lock the handler takes. It runs
		// before the handler's first event, or on its own goroutine if that comes first.
		go func() {
			i.deliver.Lock()
			defer i.deliver.Unlock()
			r.replayLocked()
		}()
	}
	return r, nil
}

// replayLocked tells a handler added after Run the store's objects as initial adds, once,
// before its first event. Callers hold deliver, so no event is being handed out: the store
// then reflects every event handed out before, and at most the one (or the batch) being
// handed out now, which the handler is then told again, at the same version.
func (r *Registration) replayLocked() {
	if !r.pending.Load() {
		return
	}
	r.pending.Store(false)
	if r.removed.Load() {
		close(r.replayed) // it is gone: nothing waits for it but HasSyncedChecker's goroutine
		return
	}
	for _, obj := range r.i.indexer.List() {
		r.h.OnAdd(obj, true)
	}
	close(r.replayed)
}

func (i *Informer) setHandlersLocked(hs []*Registration) { i.handlers.Store(&hs) }

// RemoveEventHandler removes the handler of handle. A call already begun may still complete
// after it returns, as with client-go's informer.
func (i *Informer) RemoveEventHandler(handle cache.ResourceEventHandlerRegistration) error {
	r, ok := handle.(*Registration)
	if !ok || r.i != i {
		return fmt.Errorf("informer: registration %T is not one of this informer's", handle)
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	r.removed.Store(true)
	i.setHandlersLocked(slices.DeleteFunc(slices.Clone(*i.handlers.Load()), func(x *Registration) bool { return x == r }))
	return nil
}

// Run is RunWithContext until stopCh closes.
func (i *Informer) Run(stopCh <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-stopCh:
			cancel()
		case <-ctx.Done():
		}
	}()
	i.RunWithContext(ctx)
}

// RunWithContext runs the informer until ctx ends, then returns once nothing more will change
// the store. It runs at most once; later calls return at once.
func (i *Informer) RunWithContext(ctx context.Context) {
	i.mu.Lock()
	if i.started || i.stopped {
		i.mu.Unlock()
		return
	}
	i.started = true
	i.mu.Unlock()
	if i.logger != nil {
		ctx = klog.NewContext(ctx, *i.logger)
	}
	defer func() {
		i.mu.Lock()
		i.stopped = true
		i.mu.Unlock()
		close(i.done)
	}()
	i.controller.RunWithContext(ctx)
}

// HasSynced is true once the initial list has been stored and handed to the handlers.
//
// It reads the FIFO's synced channel and takes no lock of client-go's. The FIFO may hold its
// lock while a handler runs, and a handler may wait for a lock whose holder asks HasSynced (an
// Aggregate member does both): through the FIFO's lock, that would deadlock.
func (i *Informer) HasSynced() bool {
	select {
	case <-i.synced:
		return true
	default:
		return false
	}
}

// HasSyncedChecker is HasSynced as a channel.
func (i *Informer) HasSyncedChecker() cache.DoneChecker { return i.controller.HasSyncedChecker() }

// LastSyncResourceVersion is the reflector's.
func (i *Informer) LastSyncResourceVersion() string { return i.controller.LastSyncResourceVersion() }

// IsStopped is true once Run has returned: the store is final.
func (i *Informer) IsStopped() bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.stopped
}

// GetStore is the store, as an Indexer.
func (i *Informer) GetStore() cache.Store { return i.indexer }

// GetIndexer is the store.
func (i *Informer) GetIndexer() cache.Indexer { return i.indexer }

// AddIndexers adds indexes to the store, before or after Run (and, unlike client-go's, also
// after it stopped).
func (i *Informer) AddIndexers(indexers cache.Indexers) error { return i.indexer.AddIndexers(indexers) }

// GetController is client-go's controller under the informer.
func (i *Informer) GetController() cache.Controller { return i.controller }

// SetTransform sets the transform; only before Run.
func (i *Informer) SetTransform(f cache.TransformFunc) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.started {
		return errors.New("informer: SetTransform after the informer has started")
	}
	i.transform = f
	return nil
}

// SetWatchErrorHandler is refused: wrap the ListerWatcher to see its errors.
func (i *Informer) SetWatchErrorHandler(cache.WatchErrorHandler) error {
	return errors.New("informer: watch error handlers are not supported; the ListerWatcher sees list and watch errors")
}

// SetWatchErrorHandlerWithContext is refused, as SetWatchErrorHandler.
func (i *Informer) SetWatchErrorHandlerWithContext(cache.WatchErrorHandlerWithContext) error {
	return i.SetWatchErrorHandler(nil)
}

var _ cache.SharedIndexInformer = (*Informer)(nil)
