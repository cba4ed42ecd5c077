package server

import (
	"context"
	"net"
	"net/http"
	"net/url"

	"k8s.io/apiserver/pkg/authentication/user"
)

// Peer trust, after the model of aggregated API servers: the replica that receives a request
// authenticates the caller once; when it asks other replicas for their share, it sends the
// caller's user and groups in request headers (PeerUserHeader, PeerGroupHeader) over mutual
// TLS, never the caller's credentials; an owner believes those headers only on a request whose
// client certificate a peer CA signed (Options.PeerAuthenticator, k8s.io/apiserver's
// request-header authenticator), and authorizes the user it names as it would the caller.
const (
	// PeerUserHeader names the caller a peer replica vouches for.
	PeerUserHeader = "X-Remote-User"
	// PeerGroupHeader names one of its groups; repeated for each.
	PeerGroupHeader = "X-Remote-Group"
)

// tokenHolder is who a caller with a valid token (Tokens) is, for peers: token auth has no
// users, and every token reads everything.
var tokenHolder = &user.DefaultInfo{Name: "multicache:token-holder", Groups: []string{user.AllAuthenticated}}

// UserAuthorizer is an Authorizer that can also say what a user authenticated elsewhere (by the
// replica a request reached first) may read.
type UserAuthorizer interface {
	Authorizer
	AccessFor(u user.Info) Access
}

// identified is an Access that knows its caller.
type identified interface{ User() user.Info }

// userOf is the caller of ctx, as peers are told: nil when auth is off.
func userOf(ctx context.Context) user.Info {
	switch a := accessOf(ctx).(type) {
	case identified:
		return a.User()
	case tokenHolderAccess:
		return tokenHolder
	}
	return nil
}

// tokenHolderAccess is the Access of a caller with a valid token: everything.
type tokenHolderAccess struct{ everything }

// AccessFor is everything: in token mode every authenticated caller reads the whole fleet.
func (Tokens) AccessFor(user.Info) Access { return tokenHolderAccess{} }

// peerAuthenticated authenticates r as a peer's request that names its caller: ok is false
// when r carries no peer client certificate or names nobody (then the identity headers are
// dropped, and r is authenticated as any request is).
func (s *Server) peerAuthenticated(r *http.Request, authz Authorizer) (Access, bool) {
	pa := s.opts.PeerAuthenticator
	ua, ok := authz.(UserAuthorizer)
	if pa == nil || !ok {
		dropIdentity(r.Header)
		return nil, false
	}
	resp, ok, err := pa.AuthenticateRequest(r)
	dropIdentity(r.Header)
	if err != nil || !ok {
		return nil, false
	}
	return ua.AccessFor(resp.User), true
}

// dropIdentity removes identity headers: only what a peer certificate vouches for is read.
func dropIdentity(h http.Header) {
	h.Del(PeerUserHeader)
	h.Del(PeerGroupHeader)
}

// setIdentity puts the caller of ctx in the headers of a request to a peer.
func setIdentity(h http.Header, ctx context.Context) {
	u := userOf(ctx)
	if u == nil {
		return
	}
	h.Set(PeerUserHeader, u.GetName())
	for _, g := range u.GetGroups() {
		h.Add(PeerGroupHeader, g)
	}
}

// plainRemote reports whether target is plain http to a host that is not loopback: a caller's
// credentials never go there.
func plainRemote(target string) bool {
	u, err := url.Parse(target)
	if err != nil || u.Scheme != "http" {
		return err != nil
	}
	host := u.Hostname()
	if host == "localhost" {
		return false
	}
	ip := net.ParseIP(host)
	return ip == nil || !ip.IsLoopback()
}

// inProcessKey marks a request this replica sends its own API in process (the local part of a
// fan-out): it carries the caller's Access, already authenticated once. Only this process can
// set a context value, so no client can forge it.
type inProcessKey struct{}
