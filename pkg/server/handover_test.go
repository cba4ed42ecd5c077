package server

import (
	"context"
	"net/http"
	"testing"

	"k8s.io/apiserver/pkg/authentication/authenticator"

	"github.com/multicache/multicache/pkg/auth"
	"github.com/multicache/multicache/pkg/filters"
)

// TestHandoverCaller: who may take a cluster's state. With peer certificates only a replica
// under its own; with auth off anyone; with auth on, nobody else: not a token holder (D1: no
// token travels between replicas, so none opens a handover).
func TestHandoverCaller(t *testing.T) {
	replica := context.WithValue(context.Background(), handoverReplica{}, true)
	holder := filters.WithAccess(context.Background(), auth.Everything{})
	fl := &staticFleet{}
	trust := newTestPKI(t).trust("me")
	for _, tc := range []struct {
		name        string
		opts        Options
		ctx         context.Context
		want, takes bool
	}{
		{"peer certificates, a replica", Options{Fleet: fl, PeerTrust: trust, PeerAuthenticator: fakePeerAuth{}}, replica, true, true},
		{"peer certificates, a caller who reads everything", Options{Fleet: fl, PeerTrust: trust, PeerAuthenticator: fakePeerAuth{}}, holder, false, true},
		{"static tokens and peer certificates, a token holder", Options{Fleet: fl, Tokens: []string{"t"}, PeerTrust: trust, PeerAuthenticator: fakePeerAuth{}}, holder, false, true},
		{"static tokens, no peer certificates (refused by New)", Options{Fleet: fl, Tokens: []string{"t"}}, holder, false, false},
		{"auth off", Options{Fleet: fl}, context.Background(), true, true},
	} {
		s := &Server{opts: tc.opts}
		if got := s.handoverCaller(tc.ctx); got != tc.want {
			t.Errorf("%s: may take: %t, want %t", tc.name, got, tc.want)
		}
		if got := s.handovers(); got != tc.takes {
			t.Errorf("%s: handovers: %t, want %t", tc.name, got, tc.takes)
		}
	}
}

// fakePeerAuth authenticates nobody: the tests above decide from the context.
type fakePeerAuth struct{}

func (fakePeerAuth) AuthenticateRequest(*http.Request) (*authenticator.Response, bool, error) {
	return nil, false, nil
}
