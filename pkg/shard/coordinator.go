package shard

import (
	"context"
	"errors"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"k8s.io/utils/clock"

	"github.com/multicache/multicache/pkg/clusterset"
)

// Peer is a replica as this one observes it.
type Peer struct {
	ID     string
	URL    string
	Weight int
	Live   bool // its peer Lease was renewed within LeaseDuration, as observed
	// Leaving: its replica is shutting down (it takes no cluster any more).
	Leaving bool
	Since   time.Time // when this replica first saw it live (continuously)
	Self    bool
	// Unproved: its Lease does not count (Live is false) because its advertised URL has not
	// proved that it is the replica it claims to be (Options.Verify).
	Unproved bool
}

// Owner is a cluster's fence holder as this replica observes it.
type Owner struct {
	Cluster string
	Holder  string // the fence holder's ID, "" when none
	URL     string // the holder's advertise URL, "" when unknown
	Live    bool   // the holder is a live peer
	Self    bool   // the holder is this replica
	// From is the advertise URL of the replica that handed the fence over to Holder, "" when
	// Holder took it (free, or its holder dead): where the cluster's cached state may wait.
	// FromID is that replica's ID, "" when the fence does not say (an older replica wrote it).
	From, FromID string
}

// Coordinator shares the fleet with the other replicas. It is a clusterset.Source yielding
// this replica's share; Run does the work. Create with New.
type Coordinator struct {
	opts  Options
	log   *zap.Logger
	clock clock.Clock
	ld    time.Duration
	m     *metrics
	obs   *observer
	proof *verifier     // nil without Options.Verify
	wake  chan struct{} // buffered 1: something changed, reconcile

	started atomic.Bool
	// crash, set by tests before cancelling Run's context, makes Run return as if the process
	// had died: no handoff, the peer Lease left to expire.
	crash atomic.Bool

	// leaving is set when the graceful shutdown begins: renewals then mark the peer Lease
	// leaving, and marked is closed once one such renewal succeeded. renewNow asks for one.
	leaving    atomic.Bool
	markOnce   sync.Once
	marked     chan struct{}
	renewNow   chan struct{}
	renewMu    sync.Mutex
	lastRenew  time.Time // when the last successful renewal was sent
	lastRV     string    // the resourceVersion that renewal produced
	selfSince  time.Time // when the current run of successful renewals began
	catchingUp bool      // renewing resumed after a lapse: live again once the informer shows lastRV

	mu      sync.Mutex // guards the published snapshot below
	local   func(cluster string) (running, synced bool)
	kept    func(cluster string) bool
	offered []clusterset.ClusterConfig // what Load returns, sorted by name
	loadErr error
	version uint64 // bumped whenever offered or loadErr changes
	loaded  uint64 // the version the last Load returned
	// fencedLoad: the last Load answered nothing because this replica was self-fenced; the
	// next publish while live tells subscribers again.
	fencedLoad bool
	subs       map[*chan struct{}]struct{}
	owners     []Owner
	peers      []Peer
	warming    int // offered clusters not yet running and synced, as of the last reconcile
	queued     int // owned clusters waiting for a warm-up slot, as of the last reconcile
	gen        uint64
	changed    chan struct{} // closed and replaced when gen moves
}

// New defaults and validates opts and registers the metrics. Nothing runs until Run.
func New(opts Options) (*Coordinator, error) {
	opts.Default()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	m, err := newMetrics(opts.Metrics)
	if err != nil {
		return nil, err
	}
	c := &Coordinator{
		opts:     opts,
		log:      opts.Logger.With(zap.String("identity", opts.Identity)),
		clock:    opts.Clock,
		ld:       opts.LeaseDuration,
		m:        m,
		wake:     make(chan struct{}, 1),
		marked:   make(chan struct{}),
		renewNow: make(chan struct{}, 1),
		subs:     map[*chan struct{}]struct{}{},
		changed:  make(chan struct{}),
	}
	c.obs = newObserver(opts.Clock, opts.LeaseDuration, opts.Identity, c.poke)
	if opts.Verify != nil {
		c.proof = newVerifier(opts.Verify, c.log, c.poke, opts.LeaseDuration, opts.Clock)
	}
	return c, nil
}

// poke wakes the reconcile loop; it never blocks.
func (c *Coordinator) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// Identity is this replica's name.
func (c *Coordinator) Identity() string { return c.opts.Identity }

// URL is this replica's advertise URL.
func (c *Coordinator) URL() string { return c.opts.AdvertiseURL }

// SetLocal sets how the Coordinator learns what the Registry does with a cluster: running (its
// stacks exist, stopping ones included) and synced (every resource synced or failed for
// good). Warm-up admission and handoffs wait on it. Until it is set, an offered cluster counts
// as running and synced and a dropped one as stopped.
func (c *Coordinator) SetLocal(f func(cluster string) (running, synced bool)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.local = f
	c.poke()
}

// SetKept sets how the Coordinator learns whether the Registry kept a stopped cluster's state
// for its next owner (clusterset.Registry.HasShelved). A handoff names this replica on the
// fence (multicache.io/handed-over-from) only when it did, or when the cluster still runs here
// (a shutdown that hands it over before it stopped: its state may wait by the time it is
// asked for): the next owner then warms the cluster in a handover slot (Options.MaxHandovers)
// and asks this replica for the state first. One handed over without a state lists at its
// next owner in a warm-up slot, as any cluster that starts. Until it is set, every handoff
// names this replica.
func (c *Coordinator) SetKept(f func(cluster string) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.kept = f
}

// mayHandState reports whether a handoff of cluster names this replica (SetKept).
func (c *Coordinator) mayHandState(cluster string) bool {
	c.mu.Lock()
	kept, local := c.kept, c.local
	c.mu.Unlock()
	if kept == nil || kept(cluster) {
		return true
	}
	if local == nil {
		return false
	}
	running, _ := local(cluster)
	return running
}

func (c *Coordinator) localFunc() func(string) (bool, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.local
}

// Load returns the configs, from Options.Source, of the clusters this replica may run now,
// sorted by name. The inner source's error passes through: a CompleteError as it is; any other
// error wrapped in a CompleteError, because the Coordinator completes a partial load with the
// clusters the source yielded before (so that what it stops offering is indeed stopped).
//
// Load is for the one Registry that runs the clusters: a handoff waits for a Load after the
// cluster was dropped. It checks self-fencing itself, against the clock, so a reconcile stuck
// on a slow management cluster never prolongs offering.
func (c *Coordinator) Load() ([]clusterset.ClusterConfig, error) {
	live := c.selfLive(c.clock.Now())
	c.mu.Lock()
	defer c.mu.Unlock()
	c.loaded = c.version
	c.fencedLoad = !live
	if !live {
		return nil, c.loadErr
	}
	return append([]clusterset.ClusterConfig(nil), c.offered...), c.loadErr
}

// Ready says why this replica cannot answer for its share yet, nil once it can: its peer Lease
// is renewed (it is not self-fenced) and it has reconciled with the fleet's Leases once. Until
// then Load offers nothing, and a replica that reported ready would serve an empty share.
func (c *Coordinator) Ready() error {
	live := c.selfLive(c.clock.Now())
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.version == 0:
		return errors.New("sharding: not coordinated with the other replicas yet")
	case !live:
		return errors.New("sharding: this replica's peer Lease is not renewed (self-fenced): it runs no cluster")
	}
	return nil
}

// Retains reports whether cluster is in the fleet as this replica last saw it: Load leaving it
// out then means another replica runs it (or will), or this replica may run nothing now
// (self-fenced), never that it was removed. It makes the Coordinator a
// clusterset.HandoffSource, so that the Registry stops such a cluster as a handoff.
func (c *Coordinator) Retains(cluster string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, found := slices.BinarySearchFunc(c.owners, cluster, func(o Owner, name string) int { return strings.Compare(o.Cluster, name) })
	return found
}

var _ clusterset.HandoffSource = (*Coordinator)(nil)

// Changes receives a value whenever Load may return something new, until ctx ends. Every
// caller gets its own channel.
func (c *Coordinator) Changes(ctx context.Context) <-chan struct{} {
	ch := make(chan struct{}, 1)
	c.mu.Lock()
	c.subs[&ch] = struct{}{}
	c.mu.Unlock()
	context.AfterFunc(ctx, func() {
		c.mu.Lock()
		delete(c.subs, &ch)
		c.mu.Unlock()
	})
	return ch
}

// Peers lists the replicas with a peer Lease (live ones and dead ones not yet collected) and
// this one, sorted by ID.
func (c *Coordinator) Peers() []Peer {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Peer(nil), c.peers...)
}

// Owners lists every cluster of the fleet (Options.Source), sorted by name, with its fence
// holder as this replica observes it. Empty until Run has synced.
func (c *Coordinator) Owners() []Owner {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Owner(nil), c.owners...)
}

// Warmups reports, as of the last reconcile, how many of the clusters this replica offers
// (Load) are not yet running and synced, and how many more it owns that wait for a warm-up
// slot (Options.MaxWarmups, or Options.MaxHandovers for those a peer handed over). queued > 0
// is a takeover larger than the replica warms at once: a peer died or left, or the fleet grew
// by many clusters.
func (c *Coordinator) Warmups() (warming, queued int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.warming, c.queued
}

// Generation changes whenever Owners may answer differently.
func (c *Coordinator) Generation() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// WaitChange returns a channel closed when Generation next changes.
func (c *Coordinator) WaitChange() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changed
}

// snapshot is what one reconcile publishes.
type snapshot struct {
	offered []clusterset.ClusterConfig
	loadErr error
	force   bool // the inner source changed: tell Changes subscribers even if offered looks the same
	live    bool // selfLive when the snapshot was taken
	owners  []Owner
	peers   []Peer
	// warming and queued are admit's counts: offered clusters not yet running and synced,
	// and owned ones waiting for a warm-up slot.
	warming, queued int
}

// publish installs s and tells whoever waits on what changed. It returns the version of the
// offered set now published.
func (c *Coordinator) publish(s snapshot) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	// loadErr changes only with the inner source, which sets force.
	if s.force || !sameConfigs(c.offered, s.offered) {
		c.offered, c.loadErr = s.offered, s.loadErr
		c.version++
		c.notifyLocked()
	} else if c.fencedLoad && s.live {
		c.notifyLocked() // a Load answered nothing while fenced; the fence is lifted
	}
	if !sameOwners(c.owners, s.owners) {
		c.owners = s.owners
		c.gen++
		close(c.changed)
		c.changed = make(chan struct{})
	}
	c.peers = s.peers
	c.warming, c.queued = s.warming, s.queued
	return c.version
}

// notifyLocked tells every Changes subscriber, without blocking. c.mu is held.
func (c *Coordinator) notifyLocked() {
	for ch := range c.subs {
		select {
		case *ch <- struct{}{}:
		default:
		}
	}
}

// watchdog fires Changes when the self-fencing deadline passes without a renewal, so that the
// Registry calls Load (which then answers nothing) even if the reconcile loop is blocked.
func (c *Coordinator) watchdog(ctx context.Context) {
	var reported time.Time // the deadline already reported
	for {
		wait := c.ld / 6
		if dl := c.fenceDeadline(); !dl.IsZero() {
			if d := dl.Sub(c.clock.Now()); d > 0 {
				wait = d + time.Millisecond
			} else if !dl.Equal(reported) {
				reported = dl
				c.mu.Lock()
				c.notifyLocked()
				c.mu.Unlock()
				c.poke()
			}
		}
		t := c.clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
	}
}

// loadedVersion is the version of the offered set the last Load returned.
func (c *Coordinator) loadedVersion() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.loaded
}

func sameConfigs(a, b []clusterset.ClusterConfig) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || a[i].Fingerprint != b[i].Fingerprint || a[i].Origin != b[i].Origin || a[i].Config != b[i].Config || a[i].Err != b[i].Err {
			return false
		}
	}
	return true
}

func sameOwners(a, b []Owner) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
