package peer

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/multicache/multicache/internal/pki"
)

func newCA(t *testing.T, name string) *pki.CA {
	t.Helper()
	ca, err := pki.NewCA(name, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func trustOf(t *testing.T, ca *pki.CA, req pki.Request, identity string) (*Trust, error) {
	t.Helper()
	c, k, err := ca.Issue(req)
	if err != nil {
		t.Fatal(err)
	}
	return NewTrust(c, k, ca.PEM, identity)
}

// serve starts a TLS server on loopback that presents serving (the daemon's certificate for its
// callers) and, to a client asking for t's identity, t's peer certificate.
func serve(t *testing.T, tr *Trust, serving tls.Certificate) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("ok"))
	}))
	base := &tls.Config{Certificates: []tls.Certificate{serving}, ClientAuth: tls.RequestClientCert}
	if tr != nil {
		srv.TLS = tr.ServerConfig(base)
	} else {
		srv.TLS = base
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.URL
}

func servingCert(t *testing.T, ca *pki.CA) tls.Certificate {
	t.Helper()
	c, k, err := ca.Issue(pki.Request{CommonName: "multicache", IPs: []net.IP{net.ParseIP("127.0.0.1")}, Server: true})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(c, k)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// TestTrustNamesItsReplica: a peer certificate must name its replica, serve both ways and be
// the peer CA's; every error names the setting.
func TestTrustNamesItsReplica(t *testing.T) {
	ca, other := newCA(t, "peer-ca"), newCA(t, "other-ca")
	if tr, err := trustOf(t, ca, pki.Peer("r1"), ""); err != nil || tr.Identity() != "r1" {
		t.Fatalf("a certificate for r1, identity from its common name: %v, %v", tr, err)
	}
	for _, c := range []struct {
		what     string
		ca       *pki.CA
		req      pki.Request
		identity string
		want     string
	}{
		{"another replica's certificate", ca, pki.Peer("r2"), "r1", "sharding.peerCertFile: the certificate's DNS names [r2] do not include this replica's identity \"r1\""},
		{"a client certificate only", ca, pki.Request{CommonName: "r1", DNSNames: []string{"r1"}, Client: true}, "", "not valid as a server certificate"},
		{"a server certificate only", ca, pki.Request{CommonName: "r1", DNSNames: []string{"r1"}, Server: true}, "", "not valid as a client certificate"},
		{"another CA's", other, pki.Peer("r1"), "", "signed by sharding.peerCAFile"},
		{"no common name and no identity", ca, pki.Request{DNSNames: []string{"r1"}, Server: true, Client: true}, "", "sharding.identity: not set"},
	} {
		c1, k1, err := c.ca.Issue(c.req)
		if err != nil {
			t.Fatal(err)
		}
		_, err = NewTrust(c1, k1, ca.PEM, c.identity)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.what, err, c.want)
		}
	}
	if _, err := NewTrust([]byte("x"), []byte("y"), ca.PEM, "r1"); err == nil || !strings.Contains(err.Error(), "sharding.peerCertFile, sharding.peerKeyFile") {
		t.Errorf("a bad key pair: %v", err)
	}
	c1, k1, _ := ca.Issue(pki.Peer("r1"))
	if _, err := NewTrust(c1, k1, []byte("no certificate"), "r1"); err == nil || !strings.Contains(err.Error(), "sharding.peerCAFile") {
		t.Errorf("a CA file without a certificate: %v", err)
	}
}

// TestVerifyProvesTheReplicaAtItsURL: a replica's URL proves it when its server presents, for
// its identity, a certificate the peer CA signed that names it; anything else proves nothing.
func TestVerifyProvesTheReplicaAtItsURL(t *testing.T) {
	ca, rogue := newCA(t, "peer-ca"), newCA(t, "rogue-ca")
	me, err := trustOf(t, ca, pki.Peer("me"), "")
	if err != nil {
		t.Fatal(err)
	}
	r1, err := trustOf(t, ca, pki.Peer("r1"), "")
	if err != nil {
		t.Fatal(err)
	}
	serving := servingCert(t, ca)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	honest := serve(t, r1, serving)
	if err := me.Verify(ctx, "r1", honest); err != nil {
		t.Errorf("r1 at its own URL: %v", err)
	}
	// The same URL does not prove another identity: its server has no certificate for r2.
	if err := me.Verify(ctx, "r2", honest); err == nil {
		t.Error("r1's URL proved r2")
	}
	// A listener without a peer certificate (the daemon's serving one, even the peer CA's).
	if err := me.Verify(ctx, "r1", serve(t, nil, serving)); err == nil {
		t.Error("a server without r1's peer certificate proved r1")
	}
	// A certificate for r1 that another CA signed.
	rogueTrust, err := trustOf(t, rogue, pki.Peer("r1"), "")
	if err != nil {
		t.Fatal(err)
	}
	if err := me.Verify(ctx, "r1", serve(t, rogueTrust, servingCert(t, rogue))); err == nil {
		t.Error("a certificate for r1 another CA signed proved r1")
	}
	if err := me.Verify(ctx, "r1", strings.Replace(honest, "https://", "http://", 1)); err == nil || !strings.Contains(err.Error(), "not https") {
		t.Errorf("an http URL: %v", err)
	}
	// Calls through Clients reach r1 and present this replica's certificate.
	clients := NewClients(me, time.Second)
	resp, err := clients.For("r1").Get(honest)
	if err != nil {
		t.Fatalf("a call to r1: %v", err)
	}
	resp.Body.Close()
	if _, err := clients.For("r2").Get(honest); err == nil {
		t.Error("a call meant for r2 went to r1's URL")
	}
}

// TestOverlapsFindsTheClientCAInAPeerBundle: the peer CA must not also be the callers' client
// CA, compared certificate by certificate, not file by file.
func TestOverlapsFindsTheClientCAInAPeerBundle(t *testing.T) {
	ca, clientCA := newCA(t, "peer-ca"), newCA(t, "client-ca")
	c, k, _ := ca.Issue(pki.Peer("r1"))
	bundle := append(append([]byte{}, ca.PEM...), clientCA.PEM...)
	tr, err := NewTrust(c, k, bundle, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := tr.Overlaps(clientCA.PEM); !strings.Contains(got, "client-ca") {
		t.Errorf("a peer bundle holding the client CA: Overlaps = %q", got)
	}
	own, _ := NewTrust(c, k, ca.PEM, "")
	if got := own.Overlaps(clientCA.PEM); got != "" {
		t.Errorf("distinct CAs: Overlaps = %q", got)
	}
}
