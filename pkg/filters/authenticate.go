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

type accessKey struct{}

type inProcessKey struct{}

// AccessOf is the Access of the caller of ctx: everything when auth is off.
func AccessOf(ctx context.Context) auth.Access {
	if a, ok := ctx.Value(accessKey{}).(auth.Access); ok {
		return a
	}
	return auth.Everything{}
}

// WithAccess is ctx with a's caller as its caller.
func WithAccess(ctx context.Context, a auth.Access) context.Context {
	return context.WithValue(ctx, accessKey{}, a)
}

// InProcess marks a request this process sends its own API (the local part of a fan-out): it
// carries its caller's Access, authenticated once already. Only this process can set a context
// value, so no client can forge it.
func InProcess(ctx context.Context) context.Context {
	return context.WithValue(WithAccess(ctx, AccessOf(ctx)), inProcessKey{}, true)
}

// Wrap authenticates each request of h and puts its caller's Access in the request's context:
//   - a request this process sends itself (InProcess) goes through as it is;
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
		if in, _ := r.Context().Value(inProcessKey{}).(bool); in {
			h(w, r)
			return
		}
		if acc, ok := a.peer(r); ok {
			h(w, r.WithContext(WithAccess(r.Context(), acc)))
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
