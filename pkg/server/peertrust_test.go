package server

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/multicache/multicache/pkg/auth"
	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/pkg/shard"
	"github.com/multicache/multicache/pkg/storage/peer"
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
// another cluster, over TLS to the identity its fence names, with the caller's identity in
// headers and without the caller's token.
func TestPeerCallsCarryIdentityNotCredentials(t *testing.T) {
	var mu sync.Mutex
	var got []http.Header
	pki := newTestPKI(t)
	src, _, _ := fakeClustersAB(t)
	plain := ownerOf(t, src[1], nil) // auth off: it answers anyone; what it is sent is the test
	owner := pki.serve("p2", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Clone())
		mu.Unlock()
		plain.Config.Handler.ServeHTTP(w, r)
	}))
	fl := newMovingFleet(self("a"), shard.Owner{Cluster: "b", Holder: "p2", URL: owner.URL, Live: true})
	hs, _ := kubeFixtureOf(t, src, Options{Fleet: fl, Tokens: []string{"secret"}, PeerTrust: pki.trust("me"), PeerAuthenticator: certVouches})
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
	_, s := kubeFixtureWith(t, Options{Fleet: fl, Tokens: []string{"secret"}, PeerTrust: newTestPKI(t).trust("me"), PeerAuthenticator: certVouches})
	tlsSrv := httptest.NewTLSServer(s.Handler())
	t.Cleanup(tlsSrv.Close)
	plain := httptest.NewServer(s.Handler())
	t.Cleanup(plain.Close)
	ask := func(c *http.Client, base string, headers map[string]string) int {
		req, _ := http.NewRequest(http.MethodGet, base+"/api/v1/pods", nil)
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

// TestNoTokenEverLeavesAReplica: with auth on, a sharded replica needs peer certificates, and
// with them no request goes to a peer URL that does not prove the peer: not to plain http
// (D12: identity headers would travel in clear), not to a listener without the peer's
// certificate. Neither gets a token or identity headers, through fan-outs, watches, relays or
// handovers (D1).
func TestNoTokenEverLeavesAReplica(t *testing.T) {
	fl := newMovingFleet(self("a"), self("b"))
	src, _, _ := fakeClustersAB(t)
	reg, err := clusterset.New(clusterset.Options{Source: src, Resources: []clusterset.ResourceSpec{{Name: "pods"}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, opts := range []Options{{Fleet: fl, Tokens: []string{"secret"}}, {Fleet: fl, Authorizer: auth.Tokens{"secret"}}} {
		opts.Registry = reg
		if _, err := New(opts); err == nil || !strings.Contains(err.Error(), "sharding.peerCertFile") {
			t.Errorf("a sharded replica with auth and no peer certificates: %v, want a refusal naming sharding.peerCertFile", err)
		}
	}

	var mu sync.Mutex
	var heard []string
	listener := func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		heard = append(heard, r.URL.Path+" auth="+r.Header.Get("Authorization")+" user="+r.Header.Get(auth.PeerUserHeader))
		mu.Unlock()
		http.NotFound(w, r)
	}
	plain := httptest.NewServer(http.HandlerFunc(listener))
	t.Cleanup(plain.Close)
	pki := newTestPKI(t)
	impostor := newTestPKI(t).serve("p2", http.HandlerFunc(listener)) // names p2, another CA's
	for _, url := range []string{plain.URL, impostor.URL} {
		own := self("a")
		own.From, own.FromID = url+"/from-annotation", "p2"
		f := peersFleet{movingFleet: newMovingFleet(own, shard.Owner{Cluster: "c", Holder: "p2", URL: url, Live: true}),
			peers: []shard.Peer{{ID: "me", Self: true, Live: true}, {ID: "p2", URL: url + "/peer-lease", Live: true}}}
		hs, s := kubeFixtureWith(t, Options{Fleet: f, Tokens: []string{"secret"}, PeerTrust: pki.trust("me")})
		for _, path := range []string{"/api/v1/pods", "/api/v1/pods?limit=1", "/clusters/c/api/v1/pods", "/multicache/v1/resources/pods",
			"/api/v1/pods?watch=true&sendInitialEvents=false&resourceVersionMatch=NotOlderThan"} {
			req, _ := http.NewRequest(http.MethodGet, hs.URL+path, nil)
			req.Header.Set("Authorization", "Bearer secret")
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
			resp, err := http.DefaultClient.Do(req.WithContext(ctx))
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			cancel()
		}
		_ = s
		takes := &peer.Handovers{Clients: peer.NewClients(pki.trust("me"), time.Second), Owners: f.Owners, Peers: f.Peers}
		if _, _, err := takes.Take(t.Context(), "a", "pods"); err == nil {
			t.Errorf("%s: a handover from peers that prove nothing succeeded", url)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(heard) > 0 {
		t.Errorf("URLs that do not prove their peer were sent %d requests: %v", len(heard), heard)
	}
}

// TestPeerHeaderSkipsNothingWithoutAPeerCertificate (D11): X-Multicache-Peer from a caller who
// is not a peer is ignored: it passes neither the coordination gate nor the fan-out.
func TestPeerHeaderSkipsNothingWithoutAPeerCertificate(t *testing.T) {
	hs, _ := kubeFixtureWith(t, Options{Fleet: notReadyFleet{newMovingFleet(self("a"), self("b"))}, Tokens: []string{"secret"}, PeerTrust: newTestPKI(t).trust("me")})
	req, _ := http.NewRequest(http.MethodGet, hs.URL+"/api/v1/pods", nil)
	req.Header.Set("Authorization", "Bearer secret")
	req.Header.Set("X-Multicache-Peer", "1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("a caller's request with X-Multicache-Peer on a replica not coordinated: %d, want 429", resp.StatusCode)
	}
}

// peersFleet is a movingFleet that also lists peers, as the shard Coordinator does.
type peersFleet struct {
	*movingFleet
	peers []shard.Peer
}

func (f peersFleet) Peers() []shard.Peer { return f.peers }

// TestPeerEnvelopeNeedsAPeerCertificate: with auth on, the replicas' envelope answers only a
// caller under a peer certificate: a token holder, who may read the whole fleet through the
// APIs, gets 403 there, and a caller without credentials 401. The route's refusal names the
// envelope version the call is answered in: the caller's when this release speaks it (the
// previous release's too), else this release's.
func TestPeerEnvelopeNeedsAPeerCertificate(t *testing.T) {
	fl := newMovingFleet(self("a"), self("b"))
	hs, _ := kubeFixtureWith(t, Options{Fleet: fl, Tokens: []string{"secret"}, PeerTrust: newTestPKI(t).trust("me"), PeerAuthenticator: certVouches})
	for _, tc := range []struct {
		token string
		want  int
	}{{"secret", http.StatusForbidden}, {"", http.StatusUnauthorized}} {
		for version, answered := range map[string]string{
			peer.ProtocolVersion: peer.ProtocolVersion, peer.OldestProtocolVersion: peer.OldestProtocolVersion, "2": peer.ProtocolVersion, "": peer.ProtocolVersion,
		} {
			req, _ := http.NewRequest(http.MethodPost, hs.URL+peer.ListPath, strings.NewReader(`{"resource":"pods","part":["a","b"]}`))
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			if version != "" {
				req.Header.Set(peer.ProtocolHeader, version)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.want || bytes.Contains(body, []byte(`"i `)) {
				t.Errorf("POST %s with token %q: %d %.200s; want %d", peer.ListPath, tc.token, resp.StatusCode, body, tc.want)
			}
			// (A 401 comes before the envelope's route: it names no version, and a caller
			// takes it for a refusal of itself whatever the version.)
			if got := resp.Header.Get(peer.ProtocolHeader); tc.want == http.StatusForbidden && got != answered {
				t.Errorf("POST %s of protocol %q with token %q: its refusal names protocol %q, want %q", peer.ListPath, version, tc.token, got, answered)
			}
			if got := resp.Header.Get(peer.NewestProtocolHeader); tc.want == http.StatusForbidden && got != peer.ProtocolVersion {
				t.Errorf("POST %s of protocol %q with token %q: its refusal names the newest protocol %q, want %q", peer.ListPath, version, tc.token, got, peer.ProtocolVersion)
			}
		}
	}
}

// TestPreEnvelopePartCallsAreRefused: during a rolling update from a release before the peer
// envelope, a replica of that release asks for its part of a read on the APIs' own paths with
// X-Multicache-Peer. This release would answer the whole fleet there (the header means nothing
// to it), which the caller would merge as one part: objects twice. It answers 503 with
// Retry-After instead, and the caller's read is refused, never wrong. Its own peer route's
// refusals name the envelope's version, by which a caller tells the releases apart.
func TestPreEnvelopePartCallsAreRefused(t *testing.T) {
	fl := newMovingFleet(self("a"), self("b"))
	hs, _ := kubeFixtureWith(t, Options{Fleet: fl})
	for _, path := range []string{"/api/v1/pods", "/multicache/v1/resources/pods", "/clusters/a/api/v1/pods"} {
		req, _ := http.NewRequest(http.MethodGet, hs.URL+path, nil)
		req.Header.Set("X-Multicache-Peer", "1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !bytes.Contains(body, []byte("before the peer envelope")) {
			t.Errorf("%s with X-Multicache-Peer: %d %.200s; want 503 naming the release before the envelope", path, resp.StatusCode, body)
		}
	}
	resp, err := http.Post(hs.URL+peer.Path+"nosuchcall", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Header.Get(peer.ProtocolHeader) != peer.ProtocolVersion {
		t.Errorf("a refusal of the peer route without %s: %d %v", peer.ProtocolHeader, resp.StatusCode, resp.Header)
	}
}
