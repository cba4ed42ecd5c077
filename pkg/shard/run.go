package shard

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"go.uber.org/zap"
	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinformers "k8s.io/client-go/informers/coordination/v1"
	coordlisters "k8s.io/client-go/listers/coordination/v1"
	"k8s.io/client-go/tools/cache"
)

// Run holds this replica's peer Lease and the fences until ctx ends. Then it shuts down
// gracefully: it stops offering every cluster (Load returns none, Changes fires), waits at most
// one LeaseDuration until Local reports each stopped, hands each fence to the cluster's next
// owner among the other live peers (or clears the holder when there is none), deletes its own
// peer Lease and returns. Its error says which of those writes failed; an unreachable
// management cluster is otherwise retried, not returned. Run may be called once.
func (c *Coordinator) Run(ctx context.Context) error {
	if !c.started.CompareAndSwap(false, true) {
		return errors.New("shard: Coordinator.Run called twice")
	}
	c.log.Info("joining the fleet", zap.String("namespace", c.opts.Namespace), zap.Duration("leaseDuration", c.ld), zap.Int("weight", c.opts.Weight))
	// The informer and the renewals outlive ctx: the graceful shutdown needs both.
	bg := context.WithoutCancel(ctx)
	infCtx, stopInformer := context.WithCancel(bg)
	defer stopInformer()
	indexers := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
	inf := coordinformers.NewFilteredLeaseInformer(c.opts.Client, c.opts.Namespace, 0, indexers, func(o *metav1.ListOptions) {
		o.LabelSelector = labelLease
	})
	if _, err := inf.AddEventHandler(c.obs.handler()); err != nil {
		return fmt.Errorf("shard: watching leases: %w", err)
	}
	go inf.Run(infCtx.Done())

	go c.watchdog(infCtx)
	renewCtx, stopRenewing := context.WithCancel(bg)
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		c.renewLoop(renewCtx)
	}()
	stopRenewingAndWait := func() {
		stopRenewing()
		<-renewed
	}

	st := newLoopState(coordlisters.NewLeaseLister(inf.GetIndexer()).Leases(c.opts.Namespace))
	inner := c.opts.Source.Changes(ctx)
	c.loadSource(st)
	synced := cache.WaitForCacheSync(ctx.Done(), inf.HasSynced)
	if synced {
		c.loop(ctx, st, inner)
	}
	if c.crash.Load() {
		stopRenewingAndWait() // the process "died": its Leases stay as they are
		return nil
	}
	var err error
	if synced {
		err = c.shutdown(bg, st)
	}
	stopRenewingAndWait()
	return errors.Join(err, c.deleteOwnLease(bg))
}

// loop reconciles on every Lease event but a live peer's plain renewal (observer.handler), every
// inner source change, self-fencing deadline and expiry reconcile foresaw, and at least every
// LeaseDuration/6 (fastPoll while waiting on Local), until ctx ends.
func (c *Coordinator) loop(ctx context.Context, st *loopState, inner <-chan struct{}) {
	for {
		busy, next := c.reconcile(ctx, st)
		wait := c.ld / 6
		if busy && wait > fastPoll {
			wait = fastPoll
		}
		now := c.clock.Now()
		for _, at := range []time.Time{next, c.fenceDeadline()} {
			if d := at.Sub(now); !at.IsZero() && d >= 0 && d < wait {
				wait = d + time.Millisecond
			}
		}
		t := c.clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-c.wake:
		case <-inner:
			c.loadSource(st)
		case <-t.C():
		}
		t.Stop()
	}
}

// shutdown stops offering, waits (at most a LeaseDuration) for the Registry to stop every
// cluster we hold, and hands each fence to its owner among the other live peers.
func (c *Coordinator) shutdown(ctx context.Context, st *loopState) error {
	st.stopping = true
	c.log.Info("leaving the fleet: stopping every cluster before handing it over")
	// Mark the peer Lease leaving before any handoff: peers then see the mark before the fences
	// (one watch, in resourceVersion order) and do not hand them back.
	c.leaving.Store(true)
	select {
	case c.renewNow <- struct{}{}:
	default:
	}
	deadline := c.clock.Now().Add(c.ld)
	for {
		c.reconcile(ctx, st) // publishes an empty set
		// Local alone decides here: the Registry may have stopped calling Load (its context
		// ended with ours), and whatever it engages late is dropped by its next reload.
		local, loaded := c.localFunc(), ^uint64(0)
		var running []string
		for name, f := range st.fences() {
			if holderOf(f) == c.opts.Identity && !c.stopped(st, name, local, loaded) {
				running = append(running, name)
			}
		}
		marked := false
		select {
		case <-c.marked:
			marked = true
		default:
		}
		if len(running) == 0 && marked {
			break
		}
		if !c.clock.Now().Before(deadline) {
			if len(running) > 0 {
				c.log.Warn("clusters still running after a lease duration: handing them over anyway", zap.Strings("clusters", running))
			}
			if !marked {
				c.log.Warn("could not mark the peer lease leaving: peers may hand clusters back until it is deleted")
			}
			break
		}
		t := c.clock.NewTimer(fastPoll)
		<-t.C()
	}
	now := c.clock.Now()
	members := c.members(c.obs.snapshot(now), false)
	fences := st.fences()
	var held, outside []string
	for _, name := range sortedKeys(fences) {
		if holderOf(fences[name]) != c.opts.Identity {
			continue
		}
		held = append(held, name)
		if _, ok := st.fleet[name]; !ok {
			outside = append(outside, name)
		}
	}
	// Each cluster of the fleet goes to its owner in the assignment over the fleet and the
	// other members: peers that see the same fleet, and this replica leaving, compute the same
	// one, so nothing moves again once they hold it. A fence held for a cluster outside our
	// fleet (one that left it, or reached a peer's fleet before ours and came with a handoff)
	// goes to its owner in the assignment over the fleet plus those clusters: what a peer whose
	// fleet is ours plus them computes.
	holders := heldBy(fences)
	own := st.assignmentFor(members, st.names, holders)
	var wider *assignment
	if len(outside) > 0 {
		wider = assign(members, append(slices.Clone(st.names), outside...), holders)
	}
	var errs []error
	for _, name := range held {
		to := own.owner(name)
		if _, ok := st.fleet[name]; !ok {
			to = wider.owner(name)
		}
		if err := c.handOver(ctx, fences[name], name, to); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// handOver writes fence f's holder to `to` ("" clears it). On a conflict it reads the fence
// again and retries once if we still hold it.
func (c *Coordinator) handOver(ctx context.Context, f *coordv1.Lease, cluster, to string) error {
	ctx, cancel := context.WithTimeout(ctx, c.ld)
	defer cancel()
	leases := c.opts.Client.CoordinationV1().Leases(c.opts.Namespace)
	for try := 0; ; try++ {
		c.m.fenceWrites.Inc()
		_, err := leases.Update(ctx, c.withHolder(f, cluster, to, c.clock.Now()), metav1.UpdateOptions{})
		if err == nil {
			c.m.handoffOut.Inc()
			c.log.Info("cluster owner changed: handed over on shutdown", zap.String("cluster", cluster), zap.String("from", c.opts.Identity), zap.String("to", to))
			return nil
		}
		if !apierrors.IsConflict(err) || try > 0 {
			return fmt.Errorf("handing cluster %q over to %q: %w", cluster, to, err)
		}
		f, err = leases.Get(ctx, f.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || err == nil && holderOf(f) != c.opts.Identity {
			return nil // no longer ours
		}
		if err != nil {
			return fmt.Errorf("handing cluster %q over to %q: reading its fence: %w", cluster, to, err)
		}
	}
}

// fenceAfter is how long after the last successful renewal this replica stops offering: two
// thirds of a LeaseDuration, so that its Registry has a third to stop before peers, counting a
// LeaseDuration from when they saw that renewal, take its fences.
func (c *Coordinator) fenceAfter() time.Duration { return c.ld * 2 / 3 }

// fenceDeadline is when self-fencing starts unless a renewal succeeds first.
func (c *Coordinator) fenceDeadline() time.Time {
	c.renewMu.Lock()
	defer c.renewMu.Unlock()
	if c.lastRenew.IsZero() {
		return time.Time{}
	}
	return c.lastRenew.Add(c.fenceAfter())
}

// selfLive reports whether this replica may act as a live peer: its last successful renewal
// was sent less than fenceAfter ago, and, if renewing resumed after a lapse, the informer has
// since delivered our own Lease as that renewal wrote it (so it has also delivered whatever
// peers did to our fences while we lapsed).
func (c *Coordinator) selfLive(now time.Time) bool {
	c.renewMu.Lock()
	defer c.renewMu.Unlock()
	if c.lastRenew.IsZero() || now.Sub(c.lastRenew) >= c.fenceAfter() {
		return false
	}
	if c.catchingUp {
		if c.obs.ownRV() != c.lastRV {
			return false
		}
		c.catchingUp = false
	}
	return true
}

// renewed records a successful renewal sent at start that produced resourceVersion rv.
func (c *Coordinator) renewed(start time.Time, rv string) {
	c.renewMu.Lock()
	if c.lastRenew.IsZero() || start.Sub(c.lastRenew) >= c.fenceAfter() {
		c.catchingUp, c.selfSince = true, start
		if !c.lastRenew.IsZero() {
			c.log.Info("peer lease renewed after a lapse", zap.Duration("lapse", start.Sub(c.lastRenew)))
		}
	}
	c.lastRenew, c.lastRV = start, rv
	c.renewMu.Unlock()
	c.poke()
}

// renewLoop renews the peer Lease every LeaseDuration/3 until ctx ends.
func (c *Coordinator) renewLoop(ctx context.Context) {
	var cur *coordv1.Lease
	for {
		start := c.clock.Now()
		cur = c.renew(ctx, cur, start)
		t := c.clock.NewTimer(max(0, c.ld/3-c.clock.Since(start)))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		case <-c.renewNow:
		}
		t.Stop()
	}
}

// renew writes the peer Lease once (creating it, or reading it again after a conflict, as
// needed) and returns it as written, or as last known when the write failed.
func (c *Coordinator) renew(ctx context.Context, cur *coordv1.Lease, start time.Time) *coordv1.Lease {
	ctx, cancel := context.WithTimeout(ctx, c.ld/3)
	defer cancel()
	leases := c.opts.Client.CoordinationV1().Leases(c.opts.Namespace)
	name := peerLeaseName(c.opts.Identity)
	leaving := c.leaving.Load()
	var err error
	for step := 0; step < 4; step++ {
		var out *coordv1.Lease
		if cur == nil {
			c.m.peerWrites.Inc()
			out, err = leases.Create(ctx, c.peerLease(nil, start), metav1.CreateOptions{})
		} else {
			c.m.peerWrites.Inc()
			out, err = leases.Update(ctx, c.peerLease(cur, start), metav1.UpdateOptions{})
		}
		switch {
		case err == nil:
			c.renewed(start, out.ResourceVersion)
			if leaving {
				c.markOnce.Do(func() { close(c.marked) })
			}
			return out
		case apierrors.IsNotFound(err):
			cur = nil
			continue
		case apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err):
			cur, err = leases.Get(ctx, name, metav1.GetOptions{})
			if err == nil {
				continue
			}
			cur = nil
		}
		break
	}
	if err == nil {
		err = errors.New("the peer lease kept changing under us")
	}
	if ctx.Err() == nil || errors.Is(err, context.DeadlineExceeded) {
		c.log.Warn("renewing peer lease", zap.Error(err))
	}
	return cur
}

// peerLease is our peer Lease renewed at now, from base (nil: a new one).
func (c *Coordinator) peerLease(base *coordv1.Lease, now time.Time) *coordv1.Lease {
	var l *coordv1.Lease
	if base == nil {
		l = &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: peerLeaseName(c.opts.Identity), Namespace: c.opts.Namespace}}
	} else {
		l = base.DeepCopy()
	}
	if l.Labels == nil {
		l.Labels = map[string]string{}
	}
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Labels[labelLease] = kindPeer
	l.Annotations[annoURL] = c.opts.AdvertiseURL
	l.Annotations[annoWeight] = fmt.Sprint(c.opts.Weight)
	if c.leaving.Load() {
		l.Annotations[annoLeaving] = "true"
	} else {
		delete(l.Annotations, annoLeaving)
	}
	id := c.opts.Identity
	secs := int32(min(math.Ceil(c.ld.Seconds()), math.MaxInt32))
	t := metav1.NewMicroTime(now)
	l.Spec.HolderIdentity = &id
	l.Spec.LeaseDurationSeconds = &secs
	l.Spec.RenewTime = &t
	if l.Spec.AcquireTime == nil || holderOf(base) != id {
		l.Spec.AcquireTime = &t
	}
	return l
}

// deleteOwnLease removes our peer Lease: peers stop counting us at once.
func (c *Coordinator) deleteOwnLease(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.ld)
	defer cancel()
	c.m.peerWrites.Inc()
	err := c.opts.Client.CoordinationV1().Leases(c.opts.Namespace).Delete(ctx, peerLeaseName(c.opts.Identity), metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting peer lease %s/%s: %w", c.opts.Namespace, peerLeaseName(c.opts.Identity), err)
	}
	c.log.Info("left the fleet: peer lease deleted")
	return nil
}
