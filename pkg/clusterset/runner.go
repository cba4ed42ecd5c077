package clusterset

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// runner is one engaged cluster: its discovery and its stacks, all under one context.
type runner struct {
	reg *Registry
	cfg ClusterConfig
	log *zap.Logger

	ctx     context.Context
	cancel  context.CancelFunc
	done    chan struct{}   // closed when run has returned: every goroutine, informers included, ended
	retired chan struct{}   // closed when retire has finished: stopped and, if removed, left
	after   <-chan struct{} // the cluster's previous runner's retired, or nil: run and retire wait for it

	mu      sync.Mutex
	stacks  []*stack // in Options.Resources order
	err     string   // cluster-level error (discovery)
	state   State
	health  string // the source's word that the cluster is unhealthy (ClusterConfig.Health)
	waiting string // why the source holds the cluster back (ClusterConfig.Waiting); "" once not

	restarts int // set before run, read-only after
}

// newRunner prepares a runner under parent; prev, if not nil, is the cluster's previous runner:
// the new one starts only once prev has retired, so that one cluster's stacks never overlap.
func newRunner(parent context.Context, reg *Registry, cfg ClusterConfig, prev *runner) *runner {
	ctx, cancel := context.WithCancel(parent)
	r := &runner{reg: reg, cfg: cfg, log: reg.log.With(zap.String("cluster", cfg.Name)), ctx: ctx, cancel: cancel,
		done: make(chan struct{}), retired: make(chan struct{}), state: Pending, health: cfg.Health, waiting: cfg.Waiting}
	if prev != nil {
		r.after = prev.retired
	}
	for i, spec := range reg.opts.Resources {
		s := newStack(cfg.Name, spec, &reg.board, r.log)
		if prev != nil && i < len(prev.stacks) {
			// A restart keeps the definition until the new stack reads it again.
			prev.stacks[i].mu.Lock()
			s.st.Definition = prev.stacks[i].st.Definition
			prev.stacks[i].mu.Unlock()
		}
		mem := reg.mems[spec.Name]
		s.onState = func(st State) { mem.SetDegraded(cfg.Name, st == Degraded || st == Failed) }
		r.stacks = append(r.stacks, s)
	}
	return r
}

// stop ends the runner and waits for every goroutine of it, informers included.
func (r *runner) stop() {
	r.cancel()
	<-r.done
}

// retirement is why a runner stops.
type retirement int

const (
	// restart: a new runner for the same cluster follows and replaces its members
	// (aggregate.Membership.Join), telling handlers only what differs.
	restart retirement = iota
	// removal: the cluster left the fleet; handlers are told its objects are gone.
	removal
	// handoff: the cluster stays in the fleet and another replica runs it now; handlers that
	// take handoffs are told it moved, not that its objects were deleted.
	handoff
)

// retire stops the runner and, unless a new runner follows (restart), removes the cluster
// from the aggregates.
func (r *runner) retire(how retirement) {
	defer close(r.retired)
	r.stop()
	if r.after != nil {
		<-r.after // a runner stopped before its predecessor retired: retired means the whole chain
	}
	switch how {
	case removal:
		for _, mem := range r.reg.mems {
			mem.Leave(r.cfg.Name)
		}
	case handoff:
		r.shelve()
		for _, mem := range r.reg.mems {
			mem.Handoff(r.cfg.Name)
		}
	default:
		return
	}
	r.reg.board.publish(StatusChange{Cluster: r.cfg.Name, From: Synced, To: Removed})
}

func (r *runner) restConfig() *rest.Config {
	c := rest.CopyConfig(r.cfg.Config)
	c.QPS, c.Burst = r.reg.opts.QPS, r.reg.opts.Burst
	c.UserAgent = r.reg.opts.UserAgent
	c.DisableCompression = c.DisableCompression || r.reg.opts.DisableCompression
	return c
}

// run waits for the previous runner to retire, then resolves the resources through discovery,
// starts a stack for each served one, and keeps looking for the others until the runner stops.
// Once every resource is resolved it returns early; done closes once the runner has stopped
// and its stacks and probe have ended, whichever way.
func (r *runner) run() {
	ctx := r.ctx
	var wg sync.WaitGroup
	finish := func() {
		r.cancel()
		wg.Wait()
		close(r.done)
	}
	finishLater := false
	defer func() {
		if !finishLater {
			finish()
		}
	}()
	if r.after != nil {
		select {
		case <-r.after:
		case <-ctx.Done():
			return
		}
	}
	if r.cfg.Waiting != "" {
		// Held back by the source: nothing runs, and nothing of an earlier run of the cluster
		// (a profile deleted and created again) stays.
		for _, s := range r.stacks {
			r.leaveStale(s)
			s.set(NotServed, "held back by its source")
		}
		return
	}
	if r.cfg.Err != nil {
		// The source could not build a configuration (a Secret with a broken kubeconfig): the
		// cluster stays Failed until the source changes it.
		r.mu.Lock()
		r.err = r.cfg.Err.Error() // whole: it names the Secret and key to fix
		r.mu.Unlock()
		r.log.Warn("cluster unusable", zap.Error(r.cfg.Err))
		for _, s := range r.stacks {
			r.leaveStale(s)
			s.set(Failed, r.cfg.Err.Error())
		}
		return
	}
	cfg := r.restConfig()
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		// A configuration no request can be made with: nothing will change until the source
		// does, and an earlier run's objects cannot be kept up to date.
		r.setErr(fmt.Errorf("discovery client: %w", err))
		for _, s := range r.stacks {
			r.leaveStale(s)
			s.set(Failed, "discovery client: "+describe(err))
		}
		return
	}
	r.probe(ctx, dc, &wg)
	cached := memory.NewMemCacheClient(dc)
	mapper := restmapper.NewShortcutExpander(restmapper.NewDeferredDiscoveryRESTMapper(cached), cached, func(string) {})
	r.setState(Syncing, "")

	pending := append([]*stack(nil), r.stacks...)
	backoff := time.Second
	for {
		var next []*stack
		var discoveryErr error
		for _, s := range pending {
			res, err := resolve(mapper, s.spec.Name)
			if err == nil {
				describeResource(ctx, dc, cached, &res)
			}
			switch {
			case err == nil:
				inf, mode, berr := s.build(ctx, cfg, res, r.reg.taker, firstLists{max: r.reg.opts.UnpagedListMax, budget: r.reg.unpaged})
				if berr != nil {
					r.leaveStale(s)
					s.set(Failed, berr.Error())
					next = append(next, s) // tried again at the next discovery pass
					continue
				}
				if jerr := r.reg.mems[s.spec.Name].Join(r.cfg.Name, inf); jerr != nil {
					s.endPlan()
					r.leaveStale(s)
					s.set(Failed, jerr.Error())
					next = append(next, s)
					continue
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					s.run(ctx, inf, res, mode)
				}()
			case meta.IsNoMatchError(err):
				r.leaveStale(s)
				s.set(NotServed, "not served: no resource "+s.spec.Name+" in this cluster's discovery")
				next = append(next, s)
			default:
				discoveryErr = err
				s.set(Failed, describe(err))
				next = append(next, s)
			}
		}
		pending = next
		wait := r.reg.opts.DiscoveryInterval
		if discoveryErr != nil {
			r.setErr(discoveryErr)
			wait = backoff
			backoff = min(2*backoff, r.reg.opts.RetryMax)
		} else {
			r.setErr(nil)
			backoff = time.Second
		}
		if len(pending) == 0 {
			// Nothing more to look for. The stacks and the probe run on; this goroutine ends
			// here, and the runner's end (finish) runs on its own once ctx ends: one goroutine
			// fewer per cluster for as long as it runs.
			finishLater = true
			context.AfterFunc(ctx, finish)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		cached.Invalidate()
		mapper.(interface{ Reset() }).Reset()
	}
}

// leaveStale removes what an earlier run of this cluster left in s's aggregate: this run will
// not replace it (the resource is not served here, or its stack could not be built), and its
// stopped informer's objects must not linger.
func (r *runner) leaveStale(s *stack) {
	r.reg.mems[s.spec.Name].Leave(r.cfg.Name)
}

// probe checks the API server now and then ProbeInterval after each check ends, and reports
// failures to every started stack, until ctx ends. It sends no retries: client-go's own
// retries are what hide an outage.
//
// Each check runs on a timer's goroutine, so no goroutine waits between checks (one fewer per
// cluster, BenchmarkFixedCost). wg counts the probe until it has stopped: no check runs or is
// due once wg has let go of it.
func (r *runner) probe(ctx context.Context, dc *discovery.DiscoveryClient, wg *sync.WaitGroup) {
	wg.Add(1)
	var (
		once  sync.Once
		mu    sync.Mutex // orders re-arming the timer against stopping it
		timer *time.Timer
	)
	end := func() { once.Do(wg.Done) }
	check := func() {
		r.probeOnce(ctx, dc)
		mu.Lock()
		defer mu.Unlock()
		if ctx.Err() != nil {
			end() // stop found this check running, and left the end to it
			return
		}
		timer.Reset(r.reg.opts.ProbeInterval)
	}
	mu.Lock()
	timer = time.AfterFunc(0, check)
	mu.Unlock()
	context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if timer.Stop() {
			end() // a check was due, and now will not run
		}
	})
}

func (r *runner) probeOnce(ctx context.Context, dc *discovery.DiscoveryClient) {
	pctx, cancel := context.WithTimeout(ctx, r.reg.opts.ProbeTimeout)
	err := dc.RESTClient().Get().AbsPath("/version").MaxRetries(0).Do(pctx).Error()
	timedOut := errors.Is(pctx.Err(), context.DeadlineExceeded)
	cancel()
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		text := describe(err)
		if timedOut {
			text = "unreachable: no answer within " + r.reg.opts.ProbeTimeout.String()
		}
		for _, s := range r.stacks {
			s.probeFailed(text)
		}
		return
	}
	for _, s := range r.stacks {
		s.probeOK()
	}
}

// describeResource fills in what r's discovery document and, for a custom resource, its definition
// say about it: the names a user may give it (plural, singular, kind, short names,
// plural.group, and group/version/resource, version/resource in the core group), its
// categories and its printer columns. What cannot be read is left out.
func describeResource(ctx context.Context, dc *discovery.DiscoveryClient, cached discovery.DiscoveryInterface, r *resolved) {
	r.api = metav1.APIResource{Name: r.gvr.Resource, Kind: r.gvk.Kind, Namespaced: r.namespaced}
	if list, err := cached.ServerResourcesForGroupVersion(r.gvr.GroupVersion().String()); err == nil {
		for _, ar := range list.APIResources {
			if ar.Name == r.gvr.Resource {
				r.api.SingularName, r.api.ShortNames, r.api.Categories = ar.SingularName, ar.ShortNames, ar.Categories
			}
		}
	}
	r.aliases = []string{r.gvr.Resource, strings.ToLower(r.gvk.Kind), r.gvk.Kind}
	if r.gvr.Group != "" {
		r.aliases = append(r.aliases, r.gvr.Resource+"."+r.gvr.Group, r.gvr.Group+"/"+r.gvr.Version+"/"+r.gvr.Resource)
	} else {
		r.aliases = append(r.aliases, r.gvr.Version+"/"+r.gvr.Resource)
	}
	if r.api.SingularName != "" {
		r.aliases = append(r.aliases, r.api.SingularName)
	}
	r.aliases = append(r.aliases, r.api.ShortNames...)
	if !scheme.Scheme.IsGroupRegistered(r.gvr.Group) {
		if r.definition = definition(ctx, dc, r.gvr); r.definition != nil {
			for _, v := range r.definition.Spec.Versions {
				if v.Name == r.gvr.Version {
					r.columns = v.AdditionalPrinterColumns
				}
			}
		}
	}
}

// definition reads gvr's CustomResourceDefinition, without its managedFields and its versions'
// schemas; nil when there is none (an aggregated API) or it cannot be read.
func definition(ctx context.Context, dc *discovery.DiscoveryClient, gvr schema.GroupVersionResource) *apiextensionsv1.CustomResourceDefinition {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	raw, err := dc.RESTClient().Get().AbsPath("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", gvr.Resource+"."+gvr.Group).Do(ctx).Raw()
	if err != nil {
		return nil
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if json.Unmarshal(raw, &crd) != nil {
		return nil
	}
	crd.ManagedFields = nil
	for i := range crd.Spec.Versions {
		crd.Spec.Versions[i].Schema = nil // the OpenAPI documents serve it; this is kept per cluster
	}
	return &crd
}

// ResolveResource maps a resource name as ResourceSpec.Name takes it (plural, kind, short name
// or group/version/resource) to the GroupVersionResource cfg's cluster serves, through
// discovery, as the Registry does.
func ResolveResource(cfg *rest.Config, name string) (schema.GroupVersionResource, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return schema.GroupVersionResource{}, fmt.Errorf("discovery client: %w", err)
	}
	cached := memory.NewMemCacheClient(dc)
	r, err := resolve(restmapper.NewShortcutExpander(restmapper.NewDeferredDiscoveryRESTMapper(cached), cached, func(string) {}), name)
	if err != nil {
		return schema.GroupVersionResource{}, fmt.Errorf("resource %q: %w", name, err)
	}
	return r.gvr, nil
}

// resolve maps the user's resource name to one GVR, its kind and scope, through discovery.
func resolve(mapper meta.RESTMapper, name string) (resolved, error) {
	want, err := parseResourceName(name)
	if err != nil {
		return resolved{}, err
	}
	gvr, err := mapper.ResourceFor(want)
	if err != nil {
		var amb *meta.AmbiguousResourceError
		if errors.As(err, &amb) && len(amb.MatchingResources) > 0 {
			gvr = amb.MatchingResources[0]
		} else {
			return resolved{}, err
		}
	}
	gvk, err := mapper.KindFor(gvr)
	if err != nil {
		return resolved{}, err
	}
	m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return resolved{}, err
	}
	return resolved{gvr: gvr, gvk: gvk, namespaced: m.Scope.Name() == meta.RESTScopeNameNamespace}, nil
}

func (r *runner) setErr(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil {
		r.err = ""
		return
	}
	r.err = describe(err)
	r.log.Warn("cluster error", zap.String("error", r.err))
}

func (r *runner) setState(st State, errText string) {
	r.mu.Lock()
	from := r.state
	r.state, r.err = st, errText
	r.mu.Unlock()
	r.reg.board.publish(StatusChange{Cluster: r.cfg.Name, From: from, To: st, Error: errText})
}

// setSource records what the source says of the cluster's health, and why it holds it back
// (the words only: whether it does is fixed for a runner), and tells subscribers when the
// cluster's state changes with it: it turns Degraded with an unhealthy word, or back.
func (r *runner) setSource(health, waiting string) {
	r.mu.Lock()
	wasHealth, same := r.health, r.health == health && r.waiting == waiting
	r.mu.Unlock()
	if same {
		return
	}
	from := r.status()
	r.mu.Lock()
	r.health, r.waiting = health, waiting
	r.mu.Unlock()
	to := r.status()
	switch health {
	case wasHealth:
	case "":
		r.log.Info("cluster healthy again, as its source reports")
	default:
		r.log.Warn("cluster unhealthy, as its source reports; its cache is kept", zap.String("health", health))
	}
	r.reg.board.publish(StatusChange{Cluster: r.cfg.Name, From: from.State, To: to.State, Error: to.Error})
}

func (r *runner) status() ClusterStatus {
	r.mu.Lock()
	cs := ClusterStatus{Name: r.cfg.Name, Origin: r.cfg.Origin, Error: r.err, Restarts: r.restarts}
	health, waiting := r.health, r.waiting
	stacks := r.stacks
	r.mu.Unlock()
	if len(stacks) > 0 {
		cs.Resources = make([]ResourceStatus, 0, len(stacks))
	}
	worst := Synced
	var errs []string
	for _, s := range stacks {
		st := s.status()
		cs.Resources = append(cs.Resources, st)
		if severity[st.State] > severity[worst] {
			worst = st.State
		}
		if st.State == Synced && (cs.LastSync.IsZero() || st.LastSync.Before(cs.LastSync)) {
			cs.LastSync = st.LastSync
		}
		if st.Error != "" && st.State != NotServed {
			errs = append(errs, st.Resource+": "+st.Error)
		}
	}
	cs.State = worst
	if waiting != "" {
		cs.State, cs.Error, cs.Waiting = Pending, waiting, true
		return cs
	}
	if cs.Error == "" && len(errs) > 0 {
		cs.Error = strings.Join(errs, "; ")
	}
	if health != "" {
		cs.Error = strings.TrimSuffix(health+"; "+cs.Error, "; ")
	}
	if cs.Error != "" && worst == Synced {
		cs.State = Degraded
	}
	return cs
}
