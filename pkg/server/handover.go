package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/multicache/multicache/pkg/auth"
	"github.com/multicache/multicache/pkg/filters"
	"github.com/multicache/multicache/pkg/storage"
	"github.com/multicache/multicache/pkg/storage/peer"
)

// The handover endpoint (peer.HandoverPath): the replica that handed a cluster off answers its
// next owner (peer.Handovers) with the state it kept, once. It is the replicas' own, not an API
// for clients (handoverCaller): with auth on, only under peer certificates. Secrets are never
// handed over.

type handoverReplica struct{}

// handoverAuth marks a replica's own request (its peer certificate vouching for replicaUser)
// and authenticates any other as the API does; handleHandover then decides (handoverCaller).
func (s *Server) handoverAuth(h http.HandlerFunc) http.HandlerFunc {
	authenticated := s.authn.Wrap(h)
	return func(w http.ResponseWriter, r *http.Request) {
		if s.opts.PeerAuthenticator != nil && r.Header.Get(auth.PeerUserHeader) == peer.ReplicaUser {
			resp, ok, err := s.opts.PeerAuthenticator.AuthenticateRequest(r)
			if err == nil && ok && resp.User.GetName() == peer.ReplicaUser {
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

// handover answers GET /multicache/v1/handover/{cluster}?key=K with the state this
// replica kept of cluster's resource K when it handed the cluster off: 404 when it has none.
func (s *Server) handover(w http.ResponseWriter, r *http.Request) {
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
	buf := storage.GetBuffer()
	defer storage.PutBuffer(buf)
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
