package peer

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/multicache/multicache/pkg/auth"
	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/pkg/shard"
)

// Handovers between replicas (clusterset/handover.go): the replica that handed a cluster off
// answers its next owner with the state it kept, once; the next owner asks that replica, then
// every other live one. The endpoint is the replicas' own, not an API for clients: with peer
// certificates only a replica under its own may take a state (ReplicaUser), and with auth off
// anyone (replicas then run on loopback). No token ever opens one.

// HandoverPath is followed by /{cluster}?key=….
const HandoverPath = "/multicache/v1/handover"

// ReplicaUser is the user a replica names itself as, under its peer certificate, when it asks
// another for a handover: no caller is behind it. "system:" names are Kubernetes' own.
const ReplicaUser = "system:multicache:replica"

// handoverTimeout bounds one transfer of a state: a whole cluster's objects.
const handoverTimeout = time.Minute

// Handovers takes states from other replicas.
type Handovers struct {
	Clients *Clients
	// Owners and Peers are the Fleet's (shard.Coordinator's).
	Owners func() []shard.Owner
	Peers  func() []shard.Peer
	// Timeout bounds a call until its answer's headers; the transfer has a minute at least.
	Timeout time.Duration
}

// Take asks the replicas that may keep a state of cluster's resource key for it; the first that
// has it answers (clusterset.Taker): first the replica that handed the fence over (it may have
// left the fleet since, its Lease deleted, and still wait for its states to be taken), then
// every other live peer. With peer certificates a replica is asked under them, at the identity
// the fence or its Lease names (a fence that names no identity is skipped: its URL alone proves
// nothing), and a live peer is one whose URL proved it (shard.Options.Verify).
func (h *Handovers) Take(ctx context.Context, cluster, key string) (*clusterset.Handed, bool, error) {
	type candidate struct{ id, url, what string }
	var cands []candidate
	seen := map[string]bool{}
	add := func(id, u, what string) {
		if u != "" && !seen[u] {
			seen[u] = true
			cands = append(cands, candidate{id, u, what})
		}
	}
	trusted := h.Clients.Trusted()
	for _, o := range h.Owners() {
		if o.Cluster == cluster && o.Self && o.From != "" && (o.FromID != "" || !trusted) {
			add(o.FromID, o.From, "the replica that handed "+cluster+" over")
		}
	}
	if h.Peers != nil {
		for _, p := range h.Peers() {
			if !p.Self && p.Live {
				add(p.ID, p.URL, fmt.Sprintf("replica %q", p.ID))
			}
		}
	}
	var errs []string
	for _, c := range cands {
		handed, ok, err := h.ask(ctx, c.id, c.url, c.what, cluster, key)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		if ok {
			return handed, true, nil
		}
	}
	if len(errs) > 0 {
		return nil, false, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil, false, nil
}

// ask asks replica id at base for the state it kept of cluster's resource key.
func (h *Handovers) ask(ctx context.Context, id, base, what, cluster, key string) (*clusterset.Handed, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, max(h.Timeout, handoverTimeout))
	defer cancel()
	target := strings.TrimSuffix(base, "/") + HandoverPath + "/" + url.PathEscape(cluster) + "?" + url.Values{"key": {key}}.Encode()
	trusted := h.Clients.Trusted()
	if trusted && !strings.HasPrefix(target, "https://") {
		return nil, false, fmt.Errorf("%s advertises %s: with peer certificates replicas are called over https only", what, base)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", what, err)
	}
	if trusted {
		req.Header.Set(auth.PeerUserHeader, ReplicaUser) // our peer certificate vouches for it
	}
	resp, err := h.Clients.For(id).Do(req)
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", what, err)
	}
	defer func() {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		_ = resp.Body.Close()
	}()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		return nil, false, nil
	default:
		var b bytes.Buffer
		_, _ = b.ReadFrom(io.LimitReader(resp.Body, 4<<10))
		return nil, false, fmt.Errorf("%s: handover of cluster %q: %d %s", what, cluster, resp.StatusCode, strings.TrimSpace(b.String()))
	}
	var handed clusterset.Handed
	if err := json.NewDecoder(resp.Body).Decode(&handed); err != nil {
		return nil, false, fmt.Errorf("%s: handover of cluster %q: %w", what, cluster, err)
	}
	return &handed, true, nil
}
