package server

import (
	"context"
	"net/http"

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
