package local

import (
	"context"
	"slices"
	"time"

	"github.com/multicache/multicache/pkg/clusterset"
)

// A read that must hold a cluster whole (a list, a get, a watch that starts with the current
// objects) is 429 while a cluster it spans is not complete here, never an answer without the
// cluster's objects, which a client that relists would take for their deletes. Complete means
// the watch cache holds the cluster's whole list: its informer synced and the cache took the
// list (clusterset and the aggregate tell it in order with the events, watchcache.Cache.Listed).
// A cluster whose list the cache holds stays complete while its informer restarts (queries then
// read the replaced store).

// hubCatchUp bounds how long a read waits for the watch cache to take the initial list of a
// cluster whose informer has synced: the cache is fed by the informer, so it follows within
// moments, and a client that came as soon as the cluster said Synced is answered instead of told
// to retry.
const hubCatchUp = 2 * time.Second

// Unready lists, in words, the clusters of clusters (every cluster this replica runs when
// empty) that a read of resource cannot answer completely here: not started here (planned here
// before the Registry started it), syncing, failing since it started (for DeadClusterTimeout),
// or synced while the watch cache has not taken its list yet.
func (s *Storage) Unready(resource string, clusters []string) []string {
	out, _ := s.unreadyWhy(s.view(context.Background()).info(resource), resource, clusters)
	return out
}

// unreadyAwait is Unready, after waiting (up to hubCatchUp, and while ctx lasts) as long as
// every cluster in it is synced and only the watch cache's intake of its list is pending.
func (s *Storage) unreadyAwait(ctx context.Context, info resourceInfo, resource string, clusters []string) []string {
	out, catchingUp := s.unreadyWhy(info, resource, clusters)
	if len(out) == 0 || !catchingUp {
		return out
	}
	// Each look reads every stack's status: often enough to answer soon after the watch cache
	// has the list, rarely enough that many waiting requests cost little.
	t := time.NewTicker(25 * time.Millisecond)
	defer t.Stop()
	deadline := time.After(hubCatchUp)
	for {
		select {
		case <-ctx.Done():
			return out
		case <-deadline:
			return out
		case <-t.C:
		}
		// Read again, not the request's read scope: this waits for the status to change.
		if out, catchingUp = s.unreadyWhy(s.view(context.Background()).info(resource), resource, clusters); len(out) == 0 || !catchingUp {
			return out
		}
	}
}

// unreadyWhy is Unready over info; catchingUp reports that every cluster it lists is synced and
// waits only for the watch cache to hold its whole list.
func (s *Storage) unreadyWhy(info resourceInfo, resource string, clusters []string) (out []string, catchingUp bool) {
	hub := s.hubs[resource]
	if len(clusters) == 0 {
		clusters = info.names()
	}
	catchingUp = true
	now := time.Now()
	for _, c := range clusters {
		rs, ok := info[c]
		switch {
		case !ok:
			out, catchingUp = append(out, c+" (not started on this replica yet)"), false
		case rs.State == clusterset.NotServed:
		case hub != nil && hub.Listed(c):
		case rs.State == clusterset.Pending || rs.State == clusterset.Syncing:
			out, catchingUp = append(out, c+" (syncing)"), false
		case rs.State == clusterset.Failed && now.Sub(rs.Since) < s.opts.DeadClusterTimeout:
			out, catchingUp = append(out, c+" (failing since it started: "+rs.Error+")"), false
		case rs.State == clusterset.Synced || rs.State == clusterset.Degraded:
			if hub != nil {
				out = append(out, c+" (the watch cache is still taking its initial list)")
			}
		}
	}
	slices.Sort(out)
	return out, catchingUp
}

// awaitPlanned is the 429 of a read of a plan's part while the clusters it spans are not
// complete here, after waiting briefly for them (unreadyAwait); nil outside a plan.
func (s *Storage) awaitPlanned(ctx context.Context, sel *selected) error {
	if !sel.planned || sel.none {
		return nil
	}
	if waiting := s.unreadyAwait(ctx, sel.info, sel.resource, sel.clusters()); len(waiting) > 0 {
		return refusedNotStarted(sel.resource, waiting)
	}
	return nil
}

// recheckPlanned is awaitPlanned again after the read, without waiting: a planned cluster can
// leave between the check and the read (a handoff that completed meanwhile); asked again, it
// is never missing from an answer. Leaving shows in the watch cache (Listed), so the request's
// one status read serves.
func (s *Storage) recheckPlanned(sel *selected) error {
	if !sel.planned || sel.none {
		return nil
	}
	if waiting, _ := s.unreadyWhy(sel.info, sel.resource, sel.clusters()); len(waiting) > 0 {
		return refusedNotStarted(sel.resource, waiting)
	}
	return nil
}
