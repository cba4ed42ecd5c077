package server

import (
	"context"
	"net"
	"net/http"
	"net/url"

	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/multicache/multicache/pkg/auth"
	"github.com/multicache/multicache/pkg/filters"
)

// Peer trust (auth.PeerUserHeader): a replica vouches for its caller to the owners it asks,
// with its peer certificate, instead of forwarding the caller's credentials.

// userOf is the caller of ctx, as peers are told: nil when auth is off.
func userOf(ctx context.Context) user.Info { return auth.UserOf(filters.AccessOf(ctx)) }

// setIdentity puts the caller of ctx in the headers of a request to a peer.
func setIdentity(h http.Header, ctx context.Context) {
	if u := userOf(ctx); u != nil {
		auth.SetPeerIdentity(h, u)
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
