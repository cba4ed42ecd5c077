package server

import (
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/multicache/multicache/internal/pki"
	"github.com/multicache/multicache/pkg/storage/peer"
)

// testPKI is a peer CA and the certificates of the replicas of a test.
type testPKI struct {
	t  *testing.T
	ca *pki.CA
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	ca, err := pki.NewCA("peer-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return &testPKI{t: t, ca: ca}
}

// trust is replica id's peer.Trust.
func (p *testPKI) trust(id string) *peer.Trust {
	p.t.Helper()
	c, k, err := p.ca.Issue(pki.Peer(id))
	if err != nil {
		p.t.Fatal(err)
	}
	tr, err := peer.NewTrust(c, k, p.ca.PEM, id)
	if err != nil {
		p.t.Fatal(err)
	}
	return tr
}

// serve starts h over TLS on loopback as replica id serves: its own certificate for its peers
// (asked for by id), a serving certificate for 127.0.0.1 otherwise.
func (p *testPKI) serve(id string, h http.Handler) *httptest.Server {
	p.t.Helper()
	c, k, err := p.ca.Issue(pki.Request{CommonName: "127.0.0.1", IPs: []net.IP{net.ParseIP("127.0.0.1")}, Server: true})
	if err != nil {
		p.t.Fatal(err)
	}
	serving, err := tls.X509KeyPair(c, k)
	if err != nil {
		p.t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = p.trust(id).ServerConfig(&tls.Config{Certificates: []tls.Certificate{serving}, ClientAuth: tls.RequestClientCert})
	srv.StartTLS()
	p.t.Cleanup(srv.Close)
	return srv
}
