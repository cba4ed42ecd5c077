package server

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/multicache/multicache/pkg/auth"
	"github.com/multicache/multicache/pkg/shard"
)

// certVouches is a PeerAuthenticator for tests: it believes the identity headers of a request
// that came over TLS (standing in for a verified peer client certificate), as k8s.io/apiserver's
// request-header authenticator does for one whose certificate the peer CA signed.
var certVouches = authenticator.RequestFunc(func(r *http.Request) (*authenticator.Response, bool, error) {
	if r.TLS == nil || r.Header.Get(auth.PeerUserHeader) == "" {
		return nil, false, nil
	}
	return &authenticator.Response{User: &user.DefaultInfo{Name: r.Header.Get(auth.PeerUserHeader), Groups: r.Header.Values(auth.PeerGroupHeader)}}, true, nil
})

// TestPeerCallsCarryIdentityNotCredentials: with peer trust, a fan-out asks the owner of
// another cluster with the caller's identity in headers and without the caller's token.
func TestPeerCallsCarryIdentityNotCredentials(t *testing.T) {
	var mu sync.Mutex
	var got []http.Header
	owner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Clone())
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"x"},"items":[]}`))
	}))
	t.Cleanup(owner.Close)
	fl := newMovingFleet(self("a"), shard.Owner{Cluster: "b", Holder: "p2", URL: owner.URL, Live: true})
	hs, _ := kubeFixtureWith(t, Options{Fleet: fl, Tokens: []string{"secret"}, PeerAuthenticator: certVouches})
	req, _ := http.NewRequest(http.MethodGet, hs.URL+"/api/v1/pods", nil)
	req.Header.Set("Authorization", "Bearer secret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("fleet list: %d", resp.StatusCode)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) == 0 {
		t.Fatal("the owner of b was not asked")
	}
	for _, h := range got {
		if h.Get("Authorization") != "" {
			t.Errorf("the caller's credentials went to a peer: %q", h.Get("Authorization"))
		}
		if h.Get(auth.PeerUserHeader) != auth.TokenHolder.GetName() || !slices.Equal(h.Values(auth.PeerGroupHeader), auth.TokenHolder.GetGroups()) {
			t.Errorf("identity sent: user %q groups %v, want %q %v", h.Get(auth.PeerUserHeader), h.Values(auth.PeerGroupHeader), auth.TokenHolder.GetName(), auth.TokenHolder.GetGroups())
		}
	}
}

// TestIdentityHeadersNeedAPeerCertificate: an owner believes identity headers from a peer
// (here: over TLS, see certVouches) and ignores them from anyone else, who needs credentials.
func TestIdentityHeadersNeedAPeerCertificate(t *testing.T) {
	fl := newMovingFleet(self("a"), self("b"))
	_, s := kubeFixtureWith(t, Options{Fleet: fl, Tokens: []string{"secret"}, PeerAuthenticator: certVouches})
	tlsSrv := httptest.NewTLSServer(s.Handler())
	t.Cleanup(tlsSrv.Close)
	plain := httptest.NewServer(s.Handler())
	t.Cleanup(plain.Close)
	ask := func(c *http.Client, base string, headers map[string]string) int {
		req, _ := http.NewRequest(http.MethodGet, base+"/api/v1/pods", nil)
		req.Header.Set(peerHeader, "1")
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := ask(tlsSrv.Client(), tlsSrv.URL, map[string]string{auth.PeerUserHeader: "alice"}); code != http.StatusOK {
		t.Errorf("a peer vouching for alice: %d, want 200", code)
	}
	if code := ask(http.DefaultClient, plain.URL, map[string]string{auth.PeerUserHeader: "alice"}); code != http.StatusUnauthorized {
		t.Errorf("identity headers from a non-peer: %d, want 401", code)
	}
	if code := ask(http.DefaultClient, plain.URL, map[string]string{auth.PeerUserHeader: "alice", "Authorization": "Bearer secret"}); code != http.StatusOK {
		t.Errorf("a caller with a token (and ignored headers): %d, want 200", code)
	}
}

// TestCredentialsNeverGoOverPlainHTTPToAnotherHost: without peer trust, a caller's token is
// forwarded over https or to loopback only.
func TestCredentialsNeverGoOverPlainHTTPToAnotherHost(t *testing.T) {
	for target, want := range map[string]bool{
		"http://10.0.0.5:8080/api": true, "http://peer.example:80/x": true, "http://[fd00::1]:1/": true,
		"https://10.0.0.5:8443/api": false, "http://127.0.0.1:8080/": false, "http://localhost:1/": false, "http://[::1]:2/": false,
	} {
		if got := plainRemote(target); got != want {
			t.Errorf("plainRemote(%q) = %v, want %v", target, got, want)
		}
	}
}
