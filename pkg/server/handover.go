package server

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
	"github.com/multicache/multicache/pkg/filters"
	"github.com/multicache/multicache/pkg/shard"
)

// Handovers between replicas (clusterset/handover.go): the replica that handed a cluster off
// answers its next owner with the state it kept, once; the next owner asks that replica, then
// every other live one. The endpoint is the replicas' own, not an API for clients
// (handoverCaller): with auth on, only under peer certificates. Secrets are never handed over.

// handoverPath is followed by /{cluster}?key=….
const handoverPath = "/multicache/v1/handover"

// replicaUser is the user a replica names itself as, under its peer certificate, when it asks
// another for a handover: no caller is behind it. "system:" names are Kubernetes' own.
const replicaUser = "system:multicache:replica"

type handoverReplica struct{}

// handoverAuth marks a replica's own request (its peer certificate vouching for replicaUser)
// and authenticates any other as the API does; handleHandover then decides (handoverCaller).
func (s *Server) handoverAuth(h http.HandlerFunc) http.HandlerFunc {
	authenticated := s.authn.Wrap(h)
	return func(w http.ResponseWriter, r *http.Request) {
		if s.opts.PeerAuthenticator != nil && r.Header.Get(auth.PeerUserHeader) == replicaUser {
			resp, ok, err := s.opts.PeerAuthenticator.AuthenticateRequest(r)
			if err == nil && ok && resp.User.GetName() == replicaUser {
				h(w, r.WithContext(context.WithValue(r.Context(), handoverReplica{}, true)))
				return
			}
		}
		authenticated(w, r)
	}
}

// handoverCaller reports whether the caller of a handover may have it: with peer
// certificates, a replica under its own; with auth off and none, anyone (replicas then run on
// loopback). Nobody else: a caller's token reads the fleet, not the states replicas keep for
// each other, and no token travels between replicas.
func (s *Server) handoverCaller(ctx context.Context) bool {
	switch {
	case s.opts.PeerAuthenticator != nil:
		replica, _ := ctx.Value(handoverReplica{}).(bool)
		return replica
	default:
		return s.opts.Authorizer == nil && len(s.opts.Tokens) == 0
	}
}

// handovers reports whether replicas can hand states to each other: under peer certificates,
// or with auth off.
func (s *Server) handovers() bool {
	return s.opts.Fleet != nil && (s.opts.PeerTrust != nil || (s.opts.Authorizer == nil && len(s.opts.Tokens) == 0))
}

// handoverTimeout bounds one transfer of a state: a whole cluster's objects.
const handoverTimeout = time.Minute

// handleHandover answers GET /multicache/v1/handover/{cluster}?key=K with the state this
// replica kept of cluster's resource K when it handed the cluster off: 404 when it has none.
func (s *Server) handleHandover(w http.ResponseWriter, r *http.Request) {
	if !s.handoverCaller(r.Context()) {
		filters.WriteError(w, http.StatusForbidden, "forbidden: the handover of a cluster's state is for the replicas themselves")
		return
	}
	cluster, key := r.PathValue("cluster"), r.URL.Query().Get("key")
	if key == "" {
		filters.WriteError(w, http.StatusBadRequest, "key: required")
		return
	}
	st, ok := s.reg.Shelved(cluster, key)
	if !ok {
		filters.WriteError(w, http.StatusNotFound, fmt.Sprintf("cluster %q: no state kept for %q here", cluster, key))
		return
	}
	buf := getBuffer()
	defer putBuffer(buf)
	head, _ := json.Marshal(struct {
		Key             string `json:"key"`
		ResourceVersion string `json:"resourceVersion"`
		Server          string `json:"server"`
	}{st.Key, st.ResourceVersion, st.Server})
	buf.Write(head[:len(head)-1])
	buf.WriteString(`,"items":[`)
	for i, obj := range st.Items {
		if i > 0 {
			buf.WriteByte(',')
		}
		b, err := json.Marshal(obj)
		if err != nil {
			filters.WriteError(w, http.StatusInternalServerError, fmt.Sprintf("cluster %q: encode the kept state: %v", cluster, err))
			return
		}
		buf.Write(b)
	}
	buf.WriteString("]}\n")
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(buf.Bytes())
}

// takeHandover asks the replicas that may keep a state of cluster's resource key for it; the
// first that has it answers: first the replica that handed the fence over (it may have left the
// fleet since, its Lease deleted, and still wait for its states to be taken), then every other
// live peer. With peer certificates a replica is asked under them, at the identity the fence or
// its Lease names (a fence that names no identity is skipped: its URL alone proves nothing),
// and a live peer is one whose URL proved it (shard.Options.Verify). No token is ever sent.
func (s *Server) takeHandover(ctx context.Context, cluster, key string) (*clusterset.Handed, bool, error) {
	if s.opts.Fleet == nil || s.peers == nil {
		return nil, false, nil
	}
	if !s.handovers() {
		return nil, false, fmt.Errorf("cluster %q: handovers need peer certificates between replicas, or auth off", cluster)
	}
	type candidate struct{ id, url, what string }
	var cands []candidate
	seen := map[string]bool{}
	add := func(id, u, what string) {
		if u != "" && !seen[u] {
			seen[u] = true
			cands = append(cands, candidate{id, u, what})
		}
	}
	trusted := s.peers.clients.Trusted()
	for _, o := range s.opts.Fleet.Owners() {
		if o.Cluster == cluster && o.Self && o.From != "" && (o.FromID != "" || !trusted) {
			add(o.FromID, o.From, "the replica that handed "+cluster+" over")
		}
	}
	if pf, ok := s.opts.Fleet.(interface{ Peers() []shard.Peer }); ok {
		for _, p := range pf.Peers() {
			if !p.Self && p.Live {
				add(p.ID, p.URL, fmt.Sprintf("replica %q", p.ID))
			}
		}
	}
	var errs []string
	for _, c := range cands {
		h, ok, err := s.askHandover(ctx, c.id, c.url, c.what, cluster, key)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		if ok {
			return h, true, nil
		}
	}
	if len(errs) > 0 {
		return nil, false, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil, false, nil
}

// askHandover asks replica id at base for the state it kept of cluster's resource key.
func (s *Server) askHandover(ctx context.Context, id, base, what, cluster, key string) (*clusterset.Handed, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, max(s.opts.PeerTimeout, handoverTimeout))
	defer cancel()
	target := strings.TrimSuffix(base, "/") + handoverPath + "/" + url.PathEscape(cluster) + "?" + url.Values{"key": {key}}.Encode()
	if s.peers.clients.Trusted() && !strings.HasPrefix(target, "https://") {
		return nil, false, fmt.Errorf("%s advertises %s: with peer certificates replicas are called over https only", what, base)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", what, err)
	}
	req.Header.Set(peerHeader, "1")
	if s.peers.clients.Trusted() {
		req.Header.Set(auth.PeerUserHeader, replicaUser) // our peer certificate vouches for it
	}
	resp, err := s.peers.clients.For(id).Do(req)
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", what, err)
	}
	defer drain(resp.Body)
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		return nil, false, nil
	default:
		var b bytes.Buffer
		_, _ = b.ReadFrom(io.LimitReader(resp.Body, 4<<10))
		return nil, false, fmt.Errorf("%s: handover of cluster %q: %d %s", what, cluster, resp.StatusCode, strings.TrimSpace(b.String()))
	}
	var h clusterset.Handed
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		return nil, false, fmt.Errorf("%s: handover of cluster %q: %w", what, cluster, err)
	}
	return &h, true, nil
}
