package filters

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"k8s.io/apiserver/pkg/authentication/authenticator"

	"github.com/multicache/multicache/pkg/auth"
)

// Authentication is the filter that authenticates every API request once.
type Authentication struct {
	// Authorizer authenticates a request and says what its caller may read. Nil: auth is off,
	// and every caller reads everything.
	Authorizer auth.Authorizer
	// Peers, when set, believes the user a peer replica names (auth.PeerUserHeader) on a
	// request it authenticates: one whose client certificate the peers' CA signed. The
	// Authorizer must then be an auth.UserAuthorizer.
	Peers authenticator.Request
}

type peerKey struct{}

// FromPeer reports whether the request of ctx came from another replica: its identity
// headers believed under a peer certificate.
func FromPeer(ctx context.Context) bool {
	p, _ := ctx.Value(peerKey{}).(bool)
	return p
}

// AccessOf is the Access of the caller of ctx (auth.AccessOf): everything when auth is off.
func AccessOf(ctx context.Context) auth.Access { return auth.AccessOf(ctx) }

// WithAccess is ctx with a's caller as its caller (auth.WithAccess).
func WithAccess(ctx context.Context, a auth.Access) context.Context { return auth.WithAccess(ctx, a) }

// Wrap authenticates each request of h and puts its caller's Access in the request's context:
//   - a peer's request that names its caller, under a peer certificate, is its caller's;
//   - any other is authenticated by the Authorizer: 401 without valid credentials (with
//     WWW-Authenticate), 503 when they could not be checked.
//
// Identity headers are dropped from every request Peers does not vouch for.
func (a Authentication) Wrap(h http.HandlerFunc) http.HandlerFunc {
	if a.Authorizer == nil {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request) {
		if acc, ok := a.peer(r); ok {
			h(w, r.WithContext(context.WithValue(WithAccess(r.Context(), acc), peerKey{}, true)))
			return
		}
		acc, err := a.Authorizer.Authorize(r)
		switch {
		case errors.Is(err, auth.ErrUnauthenticated):
			w.Header().Set("WWW-Authenticate", "Bearer")
			WriteError(w, http.StatusUnauthorized, err.Error())
			return
		case err != nil:
			WriteError(w, http.StatusServiceUnavailable, "authentication failed: "+err.Error())
			return
		}
		h(w, r.WithContext(WithAccess(r.Context(), acc)))
	}
}

// peer authenticates r as a peer's request that names its caller: ok is false when r carries
// no peer client certificate or names nobody (then the identity headers are dropped, and r is
// authenticated as any request is).
func (a Authentication) peer(r *http.Request) (auth.Access, bool) {
	ua, ok := a.Authorizer.(auth.UserAuthorizer)
	if a.Peers == nil || !ok {
		dropIdentity(r.Header)
		return nil, false
	}
	resp, ok, err := a.Peers.AuthenticateRequest(r)
	dropIdentity(r.Header)
	if err != nil || !ok {
		return nil, false
	}
	return ua.AccessFor(resp.User), true
}

// dropIdentity removes identity headers: only what a peer certificate vouches for is read.
func dropIdentity(h http.Header) {
	h.Del(auth.PeerUserHeader)
	h.Del(auth.PeerGroupHeader)
	h.Del(auth.PeerUIDHeader)
	for k := range h {
		if strings.HasPrefix(k, auth.PeerExtraHeaderPrefix) {
			h.Del(k)
		}
	}
}
