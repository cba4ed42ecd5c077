package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/pkg/informer"
	"github.com/multicache/multicache/test/harness"
)

// The ceiling pipeline: ceilingSources in-memory watch sources (one per cluster), each feeding
// one client-go SharedIndexInformer, and ceilingHandlers handlers that each see every event of
// every source.
const (
	ceilingSources  = 3
	ceilingHandlers = 3
	// ceilingFirstRV is the resourceVersion of a source's first watch event; its initial list
	// is at ceilingFirstRV-1. Event i of a source has resourceVersion ceilingFirstRV+i.
	ceilingFirstRV = 2
)

// ceilingEpoch is the origin of ceilingNow, a monotonic clock in nanoseconds.
var ceilingEpoch = time.Now()

func ceilingNow() int64 { return int64(time.Since(ceilingEpoch)) }

// ceilingSpec sizes one run.
type ceilingSpec struct {
	keys    int // distinct object keys per source
	initial int // objects in each source's initial list
	events  int // watch events per source
}

// Parts every generated ConfigMap shares. Nothing mutates them: the transform replaces
// managedFields rather than editing it, and handlers only read.
var (
	ceilingManagedFields = []metav1.ManagedFieldsEntry{{
		Manager: "controller", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1",
		FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(`{"f:data":{".":{},"f:config.yaml":{},"f:version":{}},"f:metadata":{"f:labels":{".":{},"f:app":{},"f:team":{},"f:tier":{}}}}`),
	}}
	ceilingData = map[string]string{"config.yaml": "replicas: 3\nlogLevel: info\nfeatures: [a, b, c]\n", "version": "7"}
)

type ceilingKey struct{ ns, name, app, tier, team string }

// ceilingWatch is a watch.Interface over an unbuffered channel, as client-go's StreamWatcher's
// result channel is: a send completes only when the reflector takes the event.
type ceilingWatch struct {
	ch   chan watch.Event
	done chan struct{}
	once sync.Once
}

func (w *ceilingWatch) Stop()                          { w.once.Do(func() { close(w.done) }) }
func (w *ceilingWatch) ResultChan() <-chan watch.Event { return w.ch }

// ceilingSource is one cluster's API server, in memory: List returns a fixed initial list, Watch
// the one ceilingWatch, into which pump sends ADDED, MODIFIED and DELETED events of ConfigMaps over
// a bounded key space, with increasing resourceVersions.
type ceilingSource struct {
	cluster string
	spec    ceilingSpec
	seed    uint64
	keys    []ceilingKey
	w       *ceilingWatch
	watches atomic.Int32

	// stamps[i] is when event i was made (ceilingNow). Written before the event is sent, so
	// that whoever received the event may read it.
	stamps []int64

	// Valid once done is closed.
	done                     chan struct{}
	added, modified, deleted int
	final                    map[string]ceilingState // the source's objects after every event
	lastSent                 int64                   // ceilingNow when the last event was taken
}

type ceilingState struct{ uid, rv string }

func newCeilingSource(cluster string, spec ceilingSpec, seed uint64) *ceilingSource {
	s := &ceilingSource{cluster: cluster, spec: spec, seed: seed, stamps: make([]int64, spec.events), done: make(chan struct{}),
		w: &ceilingWatch{ch: make(chan watch.Event), done: make(chan struct{})}}
	s.keys = make([]ceilingKey, spec.keys)
	for i := range s.keys {
		s.keys[i] = ceilingKey{ns: "ns-" + strconv.Itoa(i%20), name: "cm-" + strconv.Itoa(i),
			app: "app-" + strconv.Itoa(i%25), tier: []string{"web", "api", "db"}[i%3], team: "team-" + strconv.Itoa(i%5)}
	}
	return s
}

// IsWatchListSemanticsUnSupported tells the reflector to list, then watch.
func (s *ceilingSource) IsWatchListSemanticsUnSupported() bool { return true }

func (s *ceilingSource) lw() cache.ListerWatcher {
	return cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (kruntime.Object, error) {
			l := &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: strconv.Itoa(ceilingFirstRV - 1)}}
			for k := range s.spec.initial {
				l.Items = append(l.Items, *s.object(k, s.initialUID(k), strconv.Itoa(ceilingFirstRV-1)))
			}
			return l, nil
		},
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
			// One watch per run: a second would mean the reflector lost the first.
			if s.watches.Add(1) > 1 {
				return nil, fmt.Errorf("%s: watch already taken", s.cluster)
			}
			return s.w, nil
		},
	}, s)
}

func (s *ceilingSource) initialUID(k int) string { return s.cluster + "-init-" + strconv.Itoa(k) }

// object is a freshly made ConfigMap, as a decoder would return: its own metadata maps.
func (s *ceilingSource) object(k int, uid, rv string) *corev1.ConfigMap {
	key := &s.keys[k]
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: key.ns, Name: key.name, UID: types.UID(uid), ResourceVersion: rv,
			Labels:        map[string]string{"app": key.app, "tier": key.tier, "team": key.team},
			Annotations:   map[string]string{"owner": key.team},
			ManagedFields: ceilingManagedFields,
		},
		Data: ceilingData,
	}
}

// pump sends the source's events, at rate events/s or, if rate is 0, as fast as the reflector
// takes them, and records the final state. It stops early if the watch is stopped.
func (s *ceilingSource) pump(rate float64) {
	defer close(s.done)
	rng := rand.New(rand.NewPCG(s.seed, 0x9e3779b97f4a7c15))
	uids, rvs := make([]string, s.spec.keys), make([]string, s.spec.keys)
	for k := range s.spec.initial {
		uids[k], rvs[k] = s.initialUID(k), strconv.Itoa(ceilingFirstRV-1)
	}
	var interval float64
	if rate > 0 {
		interval = float64(time.Second) / rate
	}
	start := time.Now()
	for i := range s.spec.events {
		if interval > 0 {
			if d := time.Until(start.Add(time.Duration(float64(i) * interval))); d > 0 {
				time.Sleep(d)
			}
		}
		k := rng.IntN(s.spec.keys)
		rv := strconv.Itoa(ceilingFirstRV + i)
		var typ watch.EventType
		switch {
		case uids[k] == "":
			typ, uids[k] = watch.Added, s.cluster+"-"+rv
		case rng.IntN(5) == 0:
			typ = watch.Deleted
		default:
			typ = watch.Modified
		}
		obj := s.object(k, uids[k], rv)
		rvs[k] = rv
		if typ == watch.Deleted {
			uids[k] = ""
		}
		s.stamps[i] = ceilingNow()
		select {
		case s.w.ch <- watch.Event{Type: typ, Object: obj}:
		case <-s.w.done:
			return
		}
		switch typ {
		case watch.Added:
			s.added++
		case watch.Modified:
			s.modified++
		default:
			s.deleted++
		}
	}
	s.lastSent = ceilingNow()
	s.final = map[string]ceilingState{}
	for k, uid := range uids {
		if uid != "" {
			s.final[s.keys[k].ns+"/"+s.keys[k].name] = ceilingState{uid: uid, rv: rvs[k]}
		}
	}
}

// ceilingSlot is what one handler keeps for one source. Only that handler's goroutine writes
// it, except calls, which others read; the padding keeps slots of different handlers off one
// cache line.
type ceilingSlot struct {
	calls                  atomic.Int64
	adds, updates, deletes int
	names                  int            // bytes of namespace and name read
	apps                   map[string]int // objects per "app" label value
	data                   int            // data keys seen
	lat                    []int64        // event creation → handler call, ns; live events only
	_                      [64]byte
}

// ceilingSink is the three handlers' state, shared by every variant's wiring of them.
type ceilingSink struct {
	srcs    []*ceilingSource
	slots   [ceilingHandlers][ceilingSources]ceilingSlot
	left    atomic.Int32 // (handler, source) pairs that have not had every event yet
	end     atomic.Int64 // ceilingNow when the last pair had its last event
	allDone chan struct{}
}

func newCeilingSink(srcs []*ceilingSource) *ceilingSink {
	c := &ceilingSink{srcs: srcs, allDone: make(chan struct{})}
	c.left.Store(ceilingHandlers * ceilingSources)
	for h := range ceilingHandlers {
		for s, src := range srcs {
			c.slots[h][s].apps = map[string]int{}
			c.slots[h][s].lat = make([]int64, 0, src.spec.events)
		}
	}
	return c
}

type ceilingOp uint8

const (
	ceilingAdd ceilingOp = iota
	ceilingUpdate
	ceilingDelete
)

// call is handler h's work for one event of source s: read the object's name, labels or data,
// count the event, and record its latency.
func (c *ceilingSink) call(h, s int, op ceilingOp, obj any, initial bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	cm := obj.(*corev1.ConfigMap)
	sl := &c.slots[h][s]
	switch h {
	case 0:
		sl.names += len(cm.Namespace) + len(cm.Name)
	case 1:
		sl.apps[cm.Labels["app"]]++
	default:
		sl.data += len(cm.Data)
	}
	switch op {
	case ceilingAdd:
		sl.adds++
	case ceilingUpdate:
		sl.updates++
	default:
		sl.deletes++
	}
	if !initial {
		if rv, err := strconv.Atoi(cm.ResourceVersion); err == nil && rv >= ceilingFirstRV {
			sl.lat = append(sl.lat, ceilingNow()-c.srcs[s].stamps[rv-ceilingFirstRV])
		}
	}
	src := c.srcs[s].spec
	if sl.calls.Add(1) == int64(src.initial+src.events) && c.left.Add(-1) == 0 {
		c.end.Store(ceilingNow())
		close(c.allDone)
	}
}

// awaitInitial waits until every handler has had every source's initial list.
func (c *ceilingSink) awaitInitial(ctx context.Context) error {
	for {
		short := 0
		for h := range ceilingHandlers {
			for s, src := range c.srcs {
				if c.slots[h][s].calls.Load() < int64(src.spec.initial) {
					short++
				}
			}
		}
		if short == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("initial lists: %d handler×source pairs short: %w", short, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

func (c *ceilingSink) progress() string {
	var sb strings.Builder
	for h := range ceilingHandlers {
		for s, src := range c.srcs {
			fmt.Fprintf(&sb, " h%d/%s=%d/%d", h, src.cluster, c.slots[h][s].calls.Load(), src.spec.initial+src.spec.events)
		}
	}
	return sb.String()
}

// latencies returns every recorded latency, sorted. Call after allDone.
func (c *ceilingSink) latencies() []int64 {
	var all []int64
	for h := range ceilingHandlers {
		for s := range c.srcs {
			all = append(all, c.slots[h][s].lat...)
		}
	}
	slices.Sort(all)
	return all
}

// verify checks, after allDone and the sources' done, that every handler had every event of
// every source, by kind, and that each store holds exactly its source's final objects.
func (c *ceilingSink) verify(stores []cache.Store) error {
	var errs []string
	for s, src := range c.srcs {
		if n := src.watches.Load(); n != 1 {
			errs = append(errs, fmt.Sprintf("%s: %d watches, want 1", src.cluster, n))
		}
		for h := range ceilingHandlers {
			sl := &c.slots[h][s]
			if sl.adds != src.spec.initial+src.added || sl.updates != src.modified || sl.deletes != src.deleted {
				errs = append(errs, fmt.Sprintf("handler %d, %s: %d adds, %d updates, %d deletes; source sent %d+%d, %d, %d",
					h, src.cluster, sl.adds, sl.updates, sl.deletes, src.spec.initial, src.added, src.modified, src.deleted))
			}
			if len(sl.lat) != src.spec.events {
				errs = append(errs, fmt.Sprintf("handler %d, %s: %d latencies, want %d", h, src.cluster, len(sl.lat), src.spec.events))
			}
		}
		objs := stores[s].List()
		if len(objs) != len(src.final) {
			errs = append(errs, fmt.Sprintf("%s: store holds %d objects, source %d", src.cluster, len(objs), len(src.final)))
		}
		for _, o := range objs {
			cm := o.(*corev1.ConfigMap)
			key := cm.Namespace + "/" + cm.Name
			if want, ok := src.final[key]; !ok || want.uid != string(cm.UID) || want.rv != cm.ResourceVersion {
				errs = append(errs, fmt.Sprintf("%s: store has %s uid %s rv %s; source: %+v (present %v)", src.cluster, key, cm.UID, cm.ResourceVersion, want, ok))
				break
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// ceilingPipeline is a variant's running cache over the sources.
type ceilingPipeline struct {
	stores []cache.Store // per source, the store the variant answers queries from
	check  func() error  // variant-specific checks after a run
	stop   func()
}

type ceilingVariant struct {
	name  string // for tables
	label string // pprof label value: go tool pprof -tagfocus variant=LABEL
	start func(ctx context.Context, srcs []*ceilingSource, sink *ceilingSink) (ceilingPipeline, error)
}

func ceilingIndexers() cache.Indexers {
	return cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
}

// ceilingRunInformers starts infs and returns a stop that cancels them and waits for them to end.
func ceilingRunInformers(infs []cache.SharedIndexInformer) func() {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, inf := range infs {
		wg.Go(func() { inf.RunWithContext(ctx) })
	}
	return func() { cancel(); wg.Wait() }
}

// ceilingMulticache joins one informer per source to an Aggregate and registers the three
// handlers on it. With sync, the informer is the daemon's (informer.New: the member's feed is
// called on the informer's goroutine); without, a client-go SharedIndexInformer, whose
// processorListener stands between the informer and the feed. The handlers take every event (EveryEvent), as client-go's do; their backlog
// bound is above a run's events, as client-go's is unbounded, and a run fails if it overflows.
func ceilingMulticache(transform, sync bool) func(ctx context.Context, srcs []*ceilingSource, sink *ceilingSink) (ceilingPipeline, error) {
	return func(ctx context.Context, srcs []*ceilingSource, sink *ceilingSink) (ceilingPipeline, error) {
		agg, ms, err := aggregate.New(aggregate.Options{Resource: "configmaps", SyncPollInterval: time.Millisecond})
		if err != nil {
			return ceilingPipeline{}, err
		}
		index := map[string]int{}
		total := 0
		for s, src := range srcs {
			index[src.cluster] = s
			total += src.spec.initial + src.spec.events
		}
		var regs []*aggregate.Registration
		for h := range ceilingHandlers {
			r, err := agg.AddEventHandlerWithOptions(aggregate.HandlerFuncs{
				AddFunc:    func(c string, obj any, initial bool) { sink.call(h, index[c], ceilingAdd, obj, initial) },
				UpdateFunc: func(c string, _, obj any) { sink.call(h, index[c], ceilingUpdate, obj, false) },
				DeleteFunc: func(c string, obj any) { sink.call(h, index[c], ceilingDelete, obj, false) },
			}, aggregate.HandlerOptions{EveryEvent: true, MaxPending: max(aggregate.DefaultMaxPending, total+1)})
			if err != nil {
				return ceilingPipeline{}, err
			}
			regs = append(regs, r)
		}
		var infs []cache.SharedIndexInformer
		p := ceilingPipeline{}
		for _, src := range srcs {
			var inf cache.SharedIndexInformer
			if sync {
				si, err := informer.New(informer.Options{ListerWatcher: src.lw(), ObjectType: &corev1.ConfigMap{}, Indexers: ceilingIndexers()})
				if err != nil {
					return ceilingPipeline{}, err
				}
				inf = si
			} else {
				inf = cache.NewSharedIndexInformerWithOptions(src.lw(), &corev1.ConfigMap{}, cache.SharedIndexInformerOptions{Indexers: ceilingIndexers()})
			}
			if transform {
				if err := inf.SetTransform(clusterset.NewTransform(clusterset.TransformOptions{})); err != nil {
					return ceilingPipeline{}, err
				}
			}
			if err := ms.Join(src.cluster, inf); err != nil {
				return ceilingPipeline{}, err
			}
			infs = append(infs, inf)
		}
		stopInformers := ceilingRunInformers(infs)
		p.stop = func() {
			for _, r := range regs {
				r.Remove()
			}
			stopInformers()
		}
		if missing := agg.WaitForSync(ctx, time.Minute); missing != nil {
			p.stop()
			return ceilingPipeline{}, fmt.Errorf("unsynced: %v", missing)
		}
		for _, r := range regs {
			if !cache.WaitForCacheSync(ctx.Done(), r.HasSynced) {
				p.stop()
				return ceilingPipeline{}, fmt.Errorf("handler unsynced")
			}
		}
		for _, src := range srcs {
			store, _ := agg.Cluster(src.cluster)
			p.stores = append(p.stores, store)
		}
		p.check = func() error {
			for h, r := range regs {
				if r.Overflows() != 0 || r.Panics() != 0 {
					return fmt.Errorf("handler %d: %d overflows, %d panics", h, r.Overflows(), r.Panics())
				}
			}
			want := 0
			for _, src := range srcs {
				want += len(src.final)
			}
			if n := len(agg.List()); n != want {
				return fmt.Errorf("Aggregate lists %d objects, the sources hold %d", n, want)
			}
			return nil
		}
		return p, nil
	}
}

// ceilingClientGo is B: one plain SharedIndexInformer per source, with the namespace index a
// typed informer factory installs, and the three handlers added to each.
func ceilingClientGo(ctx context.Context, srcs []*ceilingSource, sink *ceilingSink) (ceilingPipeline, error) {
	var infs []cache.SharedIndexInformer
	var synced []cache.InformerSynced
	p := ceilingPipeline{check: func() error { return nil }}
	for s, src := range srcs {
		inf := cache.NewSharedIndexInformerWithOptions(src.lw(), &corev1.ConfigMap{}, cache.SharedIndexInformerOptions{Indexers: ceilingIndexers()})
		for h := range ceilingHandlers {
			r, err := inf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
				AddFunc:    func(obj any, initial bool) { sink.call(h, s, ceilingAdd, obj, initial) },
				UpdateFunc: func(_, obj any) { sink.call(h, s, ceilingUpdate, obj, false) },
				DeleteFunc: func(obj any) { sink.call(h, s, ceilingDelete, obj, false) },
			})
			if err != nil {
				return ceilingPipeline{}, err
			}
			synced = append(synced, r.HasSynced)
		}
		synced = append(synced, inf.HasSynced)
		infs = append(infs, inf)
		p.stores = append(p.stores, inf.GetStore())
	}
	p.stop = ceilingRunInformers(infs)
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		p.stop()
		return ceilingPipeline{}, fmt.Errorf("unsynced")
	}
	return p, nil
}

var ceilingVariants = []ceilingVariant{
	{"multicache (default transform)", "multicache", ceilingMulticache(true, true)},
	{"multicache, no transform", "multicache-notransform", ceilingMulticache(false, true)},
	{"multicache, client-go SharedIndexInformer joined", "multicache-shared", ceilingMulticache(true, false)},
	{"B: client-go informer per source", "B", ceilingClientGo},
}

// ceilingResult is one run's figures.
type ceilingResult struct {
	rate     float64       // events taken from the sources and seen by every handler, per second
	sentRate float64       // events the sources sent per second (the pacing achieved)
	p50, p99 time.Duration // handler latency from event creation
	cpu      time.Duration // process CPU time per event, user+system
	gc       float64       // share of that CPU time the garbage collector took, 0–1
	load1    float64       // 1-minute load average when the run started
	others   float64       // CPUs other processes kept busy during the timed part, on average
}

// ceilingCPU is the process's CPU time, user and system.
func ceilingCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ceilingGC is the runtime's estimate of the CPU time its garbage collector has taken, as of
// the last collection.
func ceilingGC() time.Duration {
	s := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64 {
		return 0
	}
	return time.Duration(s[0].Value.Float64() * float64(time.Second))
}

// ceilingLoad1 is the 1-minute load average.
func ceilingLoad1() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	v, _ := strconv.ParseFloat(strings.Fields(string(b))[0], 64)
	return v
}

// ceilingBusy is the CPU time every process on the machine has taken (/proc/stat: all but idle
// and iowait), or -1 where that is not known.
func ceilingBusy() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return -1
	}
	f := strings.Fields(strings.SplitN(string(b), "\n", 2)[0])
	if len(f) < 6 || f[0] != "cpu" {
		return -1
	}
	var busy int64
	// user nice system idle iowait irq softirq steal; guest time is counted in user already.
	for i, x := range f[1:min(len(f), 9)] {
		v, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			return -1
		}
		if i != 3 && i != 4 {
			busy += v
		}
	}
	return time.Duration(busy) * time.Second / 100 // USER_HZ
}

// runCeiling runs v once on fresh sources and a fresh cache: rate events/s in all (0: as fast
// as the cache takes them), then verifies what every handler and store saw. Setup and
// verification are outside the timed part, which runs from the first event made to the last
// handler call.
func runCeiling(v ceilingVariant, spec ceilingSpec, rate float64, seed uint64, timeout time.Duration) (ceilingResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	srcs := make([]*ceilingSource, ceilingSources)
	for s := range srcs {
		srcs[s] = newCeilingSource("cluster-"+strconv.Itoa(s), spec, seed+uint64(s))
	}
	sink := newCeilingSink(srcs)
	p, err := v.start(ctx, srcs, sink)
	if err != nil {
		return ceilingResult{}, fmt.Errorf("%s: %w", v.name, err)
	}
	defer p.stop()
	if err := sink.awaitInitial(ctx); err != nil {
		return ceilingResult{}, fmt.Errorf("%s: %w", v.name, err)
	}
	runtime.GC()
	res := ceilingResult{load1: ceilingLoad1()}
	cpu0, gc0, busy0 := ceilingCPU(), ceilingGC(), ceilingBusy()
	start := ceilingNow()
	for _, src := range srcs {
		go src.pump(rate / ceilingSources)
	}
	select {
	case <-sink.allDone:
	case <-ctx.Done():
		for _, src := range srcs {
			src.w.Stop()
		}
		return ceilingResult{}, fmt.Errorf("%s: not every handler had every event within %s:%s", v.name, timeout, sink.progress())
	}
	cpu, gc, busy1 := ceilingCPU()-cpu0, ceilingGC()-gc0, ceilingBusy()
	var lastSent int64
	events := 0
	for _, src := range srcs {
		<-src.done
		lastSent = max(lastSent, src.lastSent)
		events += spec.events
	}
	elapsed := time.Duration(sink.end.Load() - start)
	res.rate = float64(events) / elapsed.Seconds()
	res.sentRate = float64(events) / time.Duration(lastSent-start).Seconds()
	res.cpu = cpu / time.Duration(events)
	res.gc = gc.Seconds() / cpu.Seconds()
	if busy0 >= 0 && busy1 >= 0 {
		res.others = max(0, (busy1-busy0-cpu).Seconds()/elapsed.Seconds())
	}
	if err := sink.verify(p.stores); err != nil {
		return ceilingResult{}, fmt.Errorf("%s: %w", v.name, err)
	}
	if err := p.check(); err != nil {
		return ceilingResult{}, fmt.Errorf("%s: %w", v.name, err)
	}
	lat := sink.latencies()
	res.p50, res.p99 = time.Duration(ceilingPercentile(lat, 50)), time.Duration(ceilingPercentile(lat, 99))
	return res, nil
}

func ceilingPercentile(sorted []int64, p int) int64 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, len(sorted)*p/100)]
}

// ceilingLabeled runs f with pprof labels, which every goroutine f starts inherits, so that a CPU
// profile of the benchmark splits by variant and phase.
func ceilingLabeled(v ceilingVariant, phase string, f func()) {
	pprof.Do(context.Background(), pprof.Labels("variant", v.label, "phase", phase), func(context.Context) { f() })
}

// ceilingSpread formats the median of xs with its min and max.
func ceilingSpread(xs []float64, format string) string {
	if len(xs) == 0 {
		return "—"
	}
	return fmt.Sprintf(format+" ("+format+"–"+format+")", median(xs), slices.Min(xs), slices.Max(xs))
}

// A run is meant to have the machine to itself. Before each run the benchmark waits for 300 ms
// in which other processes keep at most ceilingBusyLimit CPUs busy; a run during which they
// kept more busy, on average, is retried up to ceilingRetries times. Waits and retries stop
// once they have taken ceilingQuietBudget in all, so that a busy machine lengthens the
// benchmark by that much at most; a run kept although disturbed is counted as such.
const (
	ceilingBusyLimit   = 0.25
	ceilingRetries     = 3
	ceilingQuietBudget = 3 * time.Minute
)

// ceilingOthers is how many CPUs other processes kept busy, on average, over d; -1 where that
// is not known.
func ceilingOthers(d time.Duration) float64 {
	busy0, cpu0, t0 := ceilingBusy(), ceilingCPU(), time.Now()
	time.Sleep(d)
	busy1, cpu1 := ceilingBusy(), ceilingCPU()
	if busy0 < 0 || busy1 < 0 {
		return -1
	}
	return max(0, (busy1-busy0-(cpu1-cpu0)).Seconds()/time.Since(t0).Seconds())
}

// ceilingAwaitQuiet waits until other processes leave the CPUs idle, for at most limit, and
// returns how long it waited.
func ceilingAwaitQuiet(limit time.Duration) time.Duration {
	start := time.Now()
	for ceilingOthers(300*time.Millisecond) > ceilingBusyLimit && time.Since(start) < limit {
	}
	return time.Since(start)
}

// BenchmarkCeiling is P6: the cache's own ceiling, with no API server. Three in-memory watch
// sources (one per cluster) send ADDED, MODIFIED and DELETED ConfigMap events over a bounded key
// space, as fast as the cache takes them, into (a) multicache: one informer per source as the
// daemon builds it (informer.New), with the daemon's default transform, joined to one Aggregate
// with three handlers; (b) the same without the transform; (c) the same with client-go
// SharedIndexInformers joined; (B) one plain client-go SharedIndexInformer per source with the
// same three handlers. Each variant's max rate is measured several times in rotating order; then each runs
// paced at 50% and 90% of its own median max rate, and its handler latency is reported. Every
// run checks that every handler had every event and that the stores equal the sources' state.
//
//	go test -run '^$' -bench Ceiling -benchtime 1x -timeout 30m ./test/bench/
//
// A CPU profile (-cpuprofile) splits by the pprof labels variant and phase.
func BenchmarkCeiling(b *testing.B) {
	runs := harness.EnvInt("MULTICACHE_BENCH_CEILING_RUNS", 5)
	events := harness.EnvInt("MULTICACHE_BENCH_CEILING_EVENTS", 600000)
	spec := ceilingSpec{keys: 2000, initial: 500, events: events / ceilingSources}
	procs := runtime.GOMAXPROCS(0)
	seed := uint64(1)
	var others, loads []float64
	disturbed, began := 0, time.Now()
	var waited time.Duration // waiting for quiet and disturbed runs, against ceilingQuietBudget
	// measure runs v when the machine is quiet, again if other processes disturbed the run.
	measure := func(v ceilingVariant, phase string, rate float64) ceilingResult {
		for try := 0; ; try++ {
			waited += ceilingAwaitQuiet(max(0, ceilingQuietBudget-waited))
			t0 := time.Now()
			var r ceilingResult
			var err error
			ceilingLabeled(v, phase, func() { r, err = runCeiling(v, spec, rate, seed, 5*time.Minute) })
			if err != nil {
				b.Fatal(err)
			}
			seed += ceilingSources
			if r.others <= ceilingBusyLimit || try == ceilingRetries || waited >= ceilingQuietBudget {
				if r.others > ceilingBusyLimit {
					disturbed++
				}
				others, loads = append(others, r.others), append(loads, r.load1)
				return r
			}
			waited += time.Since(t0)
			b.Logf("%s %s: other processes kept %.2f CPUs busy; retrying", phase, v.name, r.others)
		}
	}
	type figures struct{ rate, cpu, gc, p50, p99, sent []float64 }
	results := map[string]map[string]*figures{} // variant → phase → figures
	for _, v := range ceilingVariants {
		results[v.name] = map[string]*figures{"max": {}, "50%": {}, "90%": {}}
	}
	var ratios []float64
	for run := range runs {
		byName := map[string]float64{}
		for i := range ceilingVariants {
			v := ceilingVariants[(i+run)%len(ceilingVariants)]
			r := measure(v, "max", 0)
			f := results[v.name]["max"]
			f.rate, f.cpu, f.gc = append(f.rate, r.rate), append(f.cpu, float64(r.cpu.Nanoseconds())/1000), append(f.gc, 100*r.gc)
			byName[v.name] = r.rate
			b.Logf("max run %d  %-34s %7.0f events/s  %5.2f µs CPU/event, GC %2.0f%%  others %.2f CPUs, load %.2f",
				run+1, v.name, r.rate, float64(r.cpu.Nanoseconds())/1000, 100*r.gc, r.others, r.load1)
		}
		ratios = append(ratios, byName[ceilingVariants[0].name]/byName[ceilingVariants[len(ceilingVariants)-1].name])
	}
	type pacedRun struct {
		v   ceilingVariant
		pct int
	}
	var order []pacedRun
	for _, pct := range []int{50, 90} {
		for _, v := range ceilingVariants {
			order = append(order, pacedRun{v, pct})
		}
	}
	for run := range runs {
		for i := range order {
			pr := order[(i+run)%len(order)]
			phase := strconv.Itoa(pr.pct) + "%"
			target := median(results[pr.v.name]["max"].rate) * float64(pr.pct) / 100
			r := measure(pr.v, phase, target)
			f := results[pr.v.name][phase]
			f.p50, f.p99, f.sent = append(f.p50, float64(r.p50.Microseconds())), append(f.p99, float64(r.p99.Microseconds())), append(f.sent, r.sentRate)
			b.Logf("%s run %d  %-34s target %7.0f/s sent %7.0f/s  p50 %8s  p99 %8s  others %.2f CPUs, load %.2f",
				phase, run+1, pr.v.name, target, r.sentRate, r.p50.Round(time.Microsecond), r.p99.Round(time.Microsecond), r.others, r.load1)
		}
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "| variant | max events/s | ÷ B | CPU per event | GC share of CPU | p50 / p99 at 50%% of max | p50 / p99 at 90%% of max | rate sent at 90%% |\n|---|---|---|---|---|---|---|---|\n")
	bRate := median(results[ceilingVariants[len(ceilingVariants)-1].name]["max"].rate)
	for _, v := range ceilingVariants {
		f, p50, p90 := results[v.name]["max"], results[v.name]["50%"], results[v.name]["90%"]
		fmt.Fprintf(&sb, "| %s | %s | %.2f× | %s µs | %s%% | %s / %s µs | %s / %s µs | %s/s |\n", v.name,
			ceilingSpread(f.rate, "%.0f"), median(f.rate)/bRate, ceilingSpread(f.cpu, "%.2f"), ceilingSpread(f.gc, "%.0f"),
			ceilingSpread(p50.p50, "%.0f"), ceilingSpread(p50.p99, "%.0f"), ceilingSpread(p90.p50, "%.0f"), ceilingSpread(p90.p99, "%.0f"), ceilingSpread(p90.sent, "%.0f"))
	}
	mc := results[ceilingVariants[0].name]
	mcRate, ratio := median(mc["max"].rate), median(ratios)
	fmt.Fprintf(&sb, "\nmulticache ÷ B, per round of max-rate runs: %s×. GOMAXPROCS %d. Other processes kept %.2f–%.2f CPUs busy during the runs kept (%d of %d over %.2f); 1-minute load average at their start %.2f–%.2f, this benchmark included. The benchmark took %s, %s of it checking that the machine was quiet, waiting for it, or in runs other processes disturbed.\n",
		ceilingSpread(ratios, "%.2f"), procs, slices.Min(others), slices.Max(others), disturbed, len(others), ceilingBusyLimit, slices.Min(loads), slices.Max(loads),
		time.Since(began).Round(time.Second), waited.Round(time.Second))
	b.ReportMetric(mcRate, "multicache-events/s")
	b.ReportMetric(bRate, "B-events/s")
	b.ReportMetric(ratio, "ratio")
	b.Log("\n" + sb.String())
	if os.Getenv("MULTICACHE_BENCH_WRITE") == "" {
		return
	}
	absMet := met(mcRate >= 100000)
	if procs != 2 {
		absMet = "—"
	}
	mcP99, bP99 := median(mc["90%"].p99), median(results[ceilingVariants[len(ceilingVariants)-1].name]["90%"].p99)
	writeSection(b, "P6: the cache's own ceiling (in-memory watch source)", fmt.Sprintf(`%s GOMAXPROCS %d.

No API server and no decoding: each of 3 in-memory watch sources (one per cluster) lists %d
ConfigMaps, then sends %d watch events (ADDED, MODIFIED, DELETED over %d keys, increasing
resourceVersions; labels, an annotation, managedFields and data in every object) through an
unbuffered channel as fast as the reflector takes them. multicache: one informer per source as
the daemon builds it (client-go's Reflector → FIFO → Indexer, whose handler, the Aggregate
member's feed, runs on the informer's goroutine), with the daemon's default transform (or none),
joined to one Aggregate with three EveryEvent handlers (every event delivered, as client-go
delivers them). "client-go SharedIndexInformer joined": the same with a plain client-go
SharedIndexInformer joined, whose processorListener stands between the informer and the feed,
as a library user who joins their own informers has it. B: one plain client-go
SharedIndexInformer per source with the namespace index, the same three handlers added to each.
The handlers read the name, a label or the data, count, and record the time from the event's
creation. Max events/s divides the %d events of all sources by the time from the first event
made to the last handler call, every handler having seen every event. Then each variant runs
paced at 50%% and 90%% of its own median max rate; latency percentiles are over every handler
call of a run. After every run, each handler's adds, updates and deletes per source equal what
the source sent, and each store equals its source's final objects. CPU per event is the
process's user and system time over the run; GC share is the Go runtime's estimate of its
collector's part of it. Medians of %d runs, (min–max); variants interleaved in rotating order.
Each run starts once other processes keep at most %.2f CPUs busy, and is retried (up to %d
times) if they kept more busy during it, for as long as such waits have taken less than %s in
all. A CPU profile of the benchmark (-cpuprofile) splits by the pprof labels variant and phase.

%s
Goals: multicache ≥ 1.0× B's events/s: %s (%.2f×). ≥ 100k events/s on 2 cores: %s (%.0f/s, GOMAXPROCS %d).
Handler p99 at 90%% of max: multicache %.0f µs, B %.0f µs.

Command: `+"`MULTICACHE_BENCH_CEILING_RUNS=%d MULTICACHE_BENCH_CEILING_EVENTS=%d go test -run '^$' -bench Ceiling -benchtime 1x -timeout 30m ./test/bench/`"+`
`, machineLine(), procs, spec.initial, spec.events, spec.keys, spec.events*ceilingSources, runs, ceilingBusyLimit, ceilingRetries, ceilingQuietBudget, sb.String(),
		met(ratio >= 1.0), ratio, absMet, mcRate, procs, mcP99, bP99, runs, events))
	recordGoals(b,
		goal{"P6", "events/s, multicache ÷ B, in-memory watch source, 3 clusters", "≥ 1.0×", ceilingSpread(ratios, "%.2f") + "×", met(ratio >= 1.0), ""},
		goal{"P6", "events/s, multicache, in-memory watch source, 3 clusters", "≥ 100k/s on 2 cores", fmt.Sprintf("%s/s, GOMAXPROCS %d", ceilingSpread(mc["max"].rate, "%.0f"), procs), absMet, ""},
		goal{"P6", "handler p99 at 90% of own max rate, multicache (B)", "—", fmt.Sprintf("%s µs (B %.0f µs)", ceilingSpread(mc["90%"].p99, "%.0f"), bP99), "—", ""},
	)
}

// TestCeilingPipeline runs the ceiling benchmark's machinery small, for every variant, free
// and paced: every handler must have every event and every store its source's final state.
func TestCeilingPipeline(t *testing.T) {
	spec := ceilingSpec{keys: 60, initial: 20, events: 1500}
	for _, v := range ceilingVariants {
		for _, rate := range []float64{0, 30000} {
			r, err := runCeiling(v, spec, rate, 7, 30*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if r.rate <= 0 || r.p99 < r.p50 {
				t.Errorf("%s at %v/s: rate %v, p50 %v, p99 %v", v.name, rate, r.rate, r.p50, r.p99)
			}
		}
	}
}
