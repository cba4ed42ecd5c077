package clusterset

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/multicache/multicache/pkg/informer"
)

// stack is one cluster × resource: client-go's Reflector → FIFO → Indexer, as an
// informer.Informer that feeds the aggregate's member without a listener in between, and the
// status derived from it.
type stack struct {
	cluster string
	spec    ResourceSpec
	board   *statusBoard
	log     *zap.Logger
	onState func(State) // tells the aggregate about degradation

	mu       sync.Mutex
	st       ResourceStatus
	informer cache.SharedIndexInformer
	errRV    string // LastSyncResourceVersion when the last reflector error was recorded
	hasErr   bool   // the reflector reported an error and has not made progress since
	probeErr bool   // the cluster's health probe is failing
	progress progress
	key      string     // HandedState.Key of the running informer; under mu
	first    *firstList // how the running informer's first list runs; under mu
	running  bool       // run is following the informer; under mu
	// nudge, set while run follows an informer (under mu), is called by every state change
	// and every error, so that run, which stops polling while the stack is steady
	// (steadyLocked), follows what comes next. It never blocks.
	nudge func()
}

// stackPoll is how often run looks at an informer that is not steady: syncing, or recovering
// from an error (the reflector retries by itself and says nothing when it succeeds).
const stackPoll = 100 * time.Millisecond

// steadyLocked reports whether the stack is synced with nothing wrong: the state in which
// nothing changes unless an error is reported (onListWatchError, probeFailed), so run need not
// poll, and the cache is known in step with the server now (status reports LastSync as now).
// Callers hold s.mu.
func (s *stack) steadyLocked() bool {
	return s.running && s.st.State == Synced && !s.hasErr && !s.probeErr
}

func newStack(cluster string, spec ResourceSpec, board *statusBoard, log *zap.Logger) *stack {
	return &stack{
		cluster: cluster, spec: spec, board: board,
		log: log.With(zap.String("resource", spec.Name)),
		st:  ResourceStatus{Resource: spec.Name, State: Pending, Since: time.Now()},
	}
}

func (s *stack) status() ResourceStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.st
	st.Progress = s.progress.snapshot()
	if s.steadyLocked() {
		st.LastSync = time.Now()
	}
	return st
}

// setState changes state and error together and publishes the change. Callers hold s.mu.
func (s *stack) setStateLocked(to State, errText string) {
	if s.nudge != nil {
		s.nudge()
	}
	from := s.st.State
	s.st.State, s.st.Error = to, errText
	if from != to {
		s.st.Since = time.Now()
		s.board.publish(StatusChange{Cluster: s.cluster, Resource: s.spec.Name, From: from, To: to, Error: errText})
		s.log.Info("resource state", zap.String("from", string(from)), zap.String("to", string(to)), zap.String("error", errText))
		if s.onState != nil {
			s.onState(to)
		}
	}
}

func (s *stack) set(to State, errText string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setStateLocked(to, errText)
}

// resolved is what discovery said about the resource in this cluster.
type resolved struct {
	gvr        schema.GroupVersionResource
	gvk        schema.GroupVersionKind
	namespaced bool
	aliases    []string
	api        metav1.APIResource // name, singular, short names, categories, kind, scope
	columns    []apiextensionsv1.CustomResourceColumnDefinition
	definition *apiextensionsv1.CustomResourceDefinition // a custom resource's; read-only once set
}

// firstLists is what decides how stacks fill their stores at start (unpaged.go).
type firstLists struct {
	max    int         // Options.UnpagedListMax
	budget *listBudget // the registry's, shared by every stack
}

// build creates the informer for r with the decoding spec.Mode asks for. With take, its first
// initial list starts from the state another replica handed over, when there is one; otherwise
// fl plans it (unpaged.go), which costs the cluster one LIST with limit 1. Both happen when the
// informer runs, on its goroutine, not here.
func (s *stack) build(ctx context.Context, cfg *rest.Config, r resolved, take Taker, fl firstLists) (cache.SharedIndexInformer, Mode, error) {
	mode := s.spec.Mode
	if mode == ModeAuto {
		mode = ModeUnstructured
		if scheme.Scheme.Recognizes(r.gvk) {
			mode = ModeTyped
		}
	}
	ns := ""
	if r.namespaced {
		ns = s.spec.Namespace
	}
	var example runtime.Object
	var client any
	var list func(context.Context, metav1.ListOptions) (runtime.Object, error)
	var watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error)
	switch mode {
	case ModeTyped:
		if !scheme.Scheme.Recognizes(r.gvk) {
			return nil, mode, fmt.Errorf("mode typed: kind %s is not a built-in kind; use unstructured or metadata", r.gvk)
		}
		obj, err := scheme.Scheme.New(r.gvk)
		if err != nil {
			return nil, mode, err
		}
		example = obj
		rc, err := typedClient(cfg, r.gvk.GroupVersion())
		if err != nil {
			return nil, mode, err
		}
		client = rc
		lists := newSizedLists(r.gvk.GroupVersion().WithKind(r.gvk.Kind + "List"))
		list = func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return lists.list(ctx, rc.Get().Namespace(ns).Resource(r.gvr.Resource).VersionedParams(&o, scheme.ParameterCodec), o)
		}
		watchFn = func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.Watch = true
			return rc.Get().Namespace(ns).Resource(r.gvr.Resource).VersionedParams(&o, scheme.ParameterCodec).Watch(ctx)
		}
	case ModeUnstructured:
		dc, err := dynamic.NewForConfig(cfg)
		if err != nil {
			return nil, mode, err
		}
		ri := dc.Resource(r.gvr).Namespace(ns)
		example, client, list, watchFn = &unstructured.Unstructured{}, dc, asList(ri.List), ri.Watch
	case ModeMetadata:
		mc, err := metadata.NewForConfig(cfg)
		if err != nil {
			return nil, mode, err
		}
		ri := mc.Resource(r.gvr).Namespace(ns)
		example, client, list, watchFn = &metav1.PartialObjectMetadata{}, mc, asList(ri.List), ri.Watch
	}
	key := stateKey(s.spec, r.gvr.String(), mode)
	tweaked := func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		s.spec.tweak(&o)
		return list(ctx, o)
	}
	// Decided when client-go's reflector is created, on the informer's goroutine (unpaged.go).
	first := &firstList{decide: func() (*Handed, *listPlan) {
		if take != nil {
			h, ok, err := take(ctx, s.cluster, key)
			switch {
			case err != nil:
				s.log.Info("handoff: no state taken from the other replicas; listing from the cluster", zap.Error(err))
			case ok && h.Server != cfg.Host:
				s.log.Info("handoff: the state handed over is of another server; listing from the cluster")
			case ok && h.Key == key:
				return h, &listPlan{estimate: -1}
			}
		}
		s.progress.begin() // the estimate is the list's first request
		ectx, cancel := context.WithTimeout(ctx, estimateTimeout)
		defer cancel()
		plan, err := planList(ectx, tweaked, fl.max, fl.budget)
		if err != nil {
			s.log.Info("first list: streamed", zap.Error(err))
		}
		if plan.unpaged {
			s.log.Debug("first list: a LIST, not streamed", zap.Int("estimate", plan.estimate))
		}
		return nil, plan
	}}
	if take != nil {
		watchFn = s.handedWatch(func(context.Context) (*Handed, bool) {
			h := first.takeHanded()
			return h, h != nil
		}, func() runtime.Object { return example.DeepCopyObject() }, watchFn)
	}
	lw := listWatch(s.spec, &s.progress, client, list, watchFn, s.onListWatchError, first)
	s.mu.Lock()
	s.key = key
	s.first.done()
	s.first = first
	s.mu.Unlock()
	inf, err := informer.New(informer.Options{
		ListerWatcher: lw,
		ObjectType:    example,
		Indexers:      cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc},
		Transform:     s.progress.once(newTransform(s.spec.Transform)),
		Logger:        ptr.To(klog.Background().WithValues("cluster", s.cluster, "resource", r.gvr.String())),
	})
	if err != nil {
		s.endPlan()
		return nil, mode, fmt.Errorf("cluster %q: %s: %w", s.cluster, r.gvr, err)
	}
	return inf, mode, nil
}

// endPlan gives back what the stack's plan for its first list reserved, if it has not yet:
// the stack stops, or its informer will not run.
func (s *stack) endPlan() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.first.done()
}

// listWatch applies the spec's selectors to every list and watch, makes p follow each list,
// reports the failures client-go's reflector returns from its list and watch to report (see
// reportErrors), and declares whether the client speaks watch-list (client-go's reflector
// otherwise waits forever for the bookmark that ends a streamed initial list). With an unpaged
// plan it declares that it does not, so that the reflector lists.
func listWatch(spec ResourceSpec, p *progress, client any,
	list func(context.Context, metav1.ListOptions) (runtime.Object, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error),
	report func(context.Context, error), first *firstList) cache.ListerWatcher {
	list, watchFn = progressListWatch(p, list, watchFn, first.estimated)
	list, watchFn = reportErrors(list, watchFn, report)
	return first.listerWatcher(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			spec.tweak(&o)
			return list(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			spec.tweak(&o)
			return watchFn(ctx, o)
		},
	}, client)
}

// asList adapts a typed List method to return runtime.Object.
func asList[L runtime.Object](f func(context.Context, metav1.ListOptions) (L, error)) func(context.Context, metav1.ListOptions) (runtime.Object, error) {
	return func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		l, err := f(ctx, o)
		if err != nil {
			return nil, err
		}
		return l, nil
	}
}

// typedClient is a REST client for one group version that decodes into client-go's typed
// objects and speaks protobuf, as generated clientsets do.
func typedClient(cfg *rest.Config, gv schema.GroupVersion) (*rest.RESTClient, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &gv
	c.APIPath = "/apis"
	if gv.Group == "" {
		c.APIPath = "/api"
	}
	c.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	c.ContentType = runtime.ContentTypeProtobuf
	c.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	return rest.RESTClientFor(c)
}

// reportErrors passes failed list and watch calls to report, as far as client-go's reflector
// would have passed them to a watch error handler: every failed list, and every failed watch
// but those the reflector retries by itself (connection refused, 429: its next watch resumes
// where the last ended) and a failed watch-list (it falls back to a list, whose failure is
// reported). An error that ends a watch stream already open is not seen here: the reflector's
// next call, or the cluster's health probe, reports an outage. The size estimate of a streamed
// list (progressListWatch) calls the list unwrapped, so its failure is no failure of the cache.
func reportErrors(
	list func(context.Context, metav1.ListOptions) (runtime.Object, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error),
	report func(context.Context, error)) (
	func(context.Context, metav1.ListOptions) (runtime.Object, error),
	func(context.Context, metav1.ListOptions) (watch.Interface, error)) {
	return func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			out, err := list(ctx, o)
			if err != nil {
				report(ctx, err)
			}
			return out, err
		}, func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			w, err := watchFn(ctx, o)
			streamed := o.SendInitialEvents != nil && *o.SendInitialEvents
			if err != nil && !streamed && !utilnet.IsConnectionRefused(err) && !apierrors.IsTooManyRequests(err) {
				report(ctx, err)
			}
			return w, err
		}
}

// onListWatchError records a failed list or watch call, which the reflector will retry.
func (s *stack) onListWatchError(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st.WatchRestarts++
	if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) || apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge) {
		return // routine: the reflector relists, or lists again from the latest version
	}
	if s.steadyLocked() {
		s.st.LastSync = time.Now() // in step until now
	}
	s.hasErr = true
	if s.informer != nil {
		s.errRV = s.informer.LastSyncResourceVersion()
	}
	text := describe(err)
	switch s.st.State {
	case Synced, Degraded:
		s.setStateLocked(Degraded, text)
	default:
		s.setStateLocked(Failed, text)
	}
}

// probeFailed records a failed health probe of the cluster. It holds until a probe succeeds.
func (s *stack) probeFailed(text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.informer == nil || s.st.State == NotServed {
		return
	}
	if s.steadyLocked() {
		s.st.LastSync = time.Now() // in step until now
	}
	s.probeErr = true
	switch s.st.State {
	case Synced, Degraded:
		s.setStateLocked(Degraded, text)
	default:
		s.setStateLocked(Failed, text)
	}
}

// probeOK clears a probe failure. The state returns to Synced unless the reflector itself still
// reports an error; the reflector's own retries then bring the cache up to date, so for a few
// seconds after an outage the status may say Synced while events from the outage are arriving.
func (s *stack) probeOK() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.probeErr {
		return
	}
	s.probeErr = false
	if !s.hasErr && s.informer != nil && s.informer.HasSynced() {
		s.st.LastSync = time.Now()
		s.setStateLocked(Synced, "")
	}
}

// run starts the informer and follows its sync and recovery until ctx ends. It returns once
// the informer has stopped, so its store is final.
func (s *stack) run(ctx context.Context, inf cache.SharedIndexInformer, r resolved, mode Mode) {
	s.mu.Lock()
	s.informer = inf
	s.st.GVR, s.st.Mode = r.gvr.String(), mode
	s.st.Group, s.st.Version, s.st.Kind = r.gvk.Group, r.gvk.Version, r.gvk.Kind
	s.st.Namespaced, s.st.Aliases = r.namespaced, r.aliases
	s.st.Plural, s.st.Singular, s.st.ShortNames, s.st.Categories = r.api.Name, r.api.SingularName, r.api.ShortNames, r.api.Categories
	s.st.PrinterColumns = r.columns
	if r.definition != nil { // else the last one read, if any: it could not be read this time
		s.st.Definition = r.definition
	}
	if s.st.State == Pending || s.st.State == NotServed {
		s.setStateLocked(Syncing, "")
	}
	s.running = true
	s.mu.Unlock()
	// run's own goroutine runs the informer (its processing loop); following it takes none
	// while the stack is steady. A look at the informer (follow) runs on a timer's goroutine:
	// at once, then every stackPoll while the stack is not steady, and whenever a state
	// change or an error nudges it. A steady stack is not polled (at 1,000 clusters × 2
	// resources, polling every stack cost the idle daemon about 11% of a core:
	// BenchmarkFixedCost). The informer's first sync is noticed when it happens, not at the
	// next poll: a replica's readiness waits for it. (A request that comes at once waits
	// briefly for the server's watch cache to take the list.)
	start := time.Now()
	var following sync.Mutex // one look at a time
	var poll *time.Timer
	follow := func() {
		following.Lock()
		defer following.Unlock()
		if ctx.Err() != nil {
			return
		}
		if !s.follow(inf, start) {
			poll.Reset(stackPoll)
		}
	}
	poll = time.AfterFunc(time.Hour, follow) // set before follow can run: it resets poll
	s.mu.Lock()
	s.nudge = func() { poll.Reset(0) }
	s.mu.Unlock()
	poll.Reset(0)
	firstSync := inf.HasSyncedChecker().Done()
	go func() { // ends at the first sync, or with ctx
		select {
		case <-firstSync:
			s.endPlan() // the first list is in the store: what it reserved is free again
			follow()
		case <-ctx.Done():
		}
	}()
	// As ctx ends, the stack stops following (LastSync frozen), before the informer has
	// stopped.
	unfollowed := make(chan struct{})
	stopUnfollow := context.AfterFunc(ctx, func() {
		defer close(unfollowed)
		poll.Stop()
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.steadyLocked() {
			s.st.LastSync = time.Now() // in step until it stopped
		}
		s.running = false
		s.nudge = nil
	})
	defer s.endPlan()
	inf.RunWithContext(ctx)
	if stopUnfollow() {
		// The informer returned before ctx ended (it had run already): nothing more to follow.
		poll.Stop()
		s.mu.Lock()
		s.running, s.nudge = false, nil
		s.mu.Unlock()
		return
	}
	<-unfollowed
	following.Lock()
	defer following.Unlock() // returns once a look under way has ended
}

// follow is one look at a running informer: its sync, and its recovery from an error (the
// reflector retries by itself and says nothing when it succeeds). It reports whether the
// stack is steady, needing no look until it is nudged.
func (s *stack) follow(inf cache.SharedIndexInformer, start time.Time) bool {
	if !inf.HasSynced() {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rv := inf.LastSyncResourceVersion()
	switch {
	case s.probeErr:
		// Wait for the probe to pass.
	case s.st.State == Syncing || (s.st.State == Failed && !s.hasErr):
		s.st.LastSync = time.Now()
		if s.st.SyncDuration == 0 {
			s.st.SyncDuration = time.Since(start)
		}
		s.setStateLocked(Synced, "")
		s.log.Info("synced", zap.Duration("took", time.Since(start)), zap.Int("objects", len(inf.GetStore().ListKeys())))
	case s.hasErr && rv != s.errRV:
		// The reflector listed or watched successfully since the error.
		s.hasErr = false
		s.st.LastSync = time.Now()
		s.setStateLocked(Synced, "")
	case s.hasErr && s.st.State == Failed:
		// Synced from the store's point of view but the error stands: wait for progress.
	}
	return s.steadyLocked()
}
