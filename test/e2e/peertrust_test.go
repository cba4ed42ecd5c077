package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/multicache/multicache/test/fleet"
)

// peerPKI is what sharded replicas with peer trust are started with: a CA that signs their
// serving certificate and their peer client certificate, and the flags that name them.
type peerPKI struct {
	ca   testCA
	args []string
	pool *x509.CertPool
}

func newPeerPKI(t *testing.T) *peerPKI {
	t.Helper()
	dir := t.TempDir()
	ca := newTestCA(t, "multicache-peer-ca")
	write := func(name string, der []byte, key any) (string, string) {
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		c, k := filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
		for path, b := range map[string][]byte{c: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), k: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})} {
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return c, k
	}
	der, key := ca.issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "127.0.0.1"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	servingCert, servingKey := write("serving", der, key)
	der, key = ca.issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "multicache-peer"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	peerCert, peerKey := write("peer", der, key)
	caPath := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caPath, ca.pem, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "multicache.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("server:\n  tls: {certFile: %q, keyFile: %q}\nresources: [{name: %s}]\n", servingCert, servingKey, scaleResource)), 0o600); err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.pem)
	return &peerPKI{ca: ca, pool: pool, args: []string{"--config", cfg, "--peer-cert-file", peerCert, "--peer-key-file", peerKey, "--peer-ca-file", caPath}}
}

// clientWith trusts the replicas' CA and presents cert, if any.
func (p *peerPKI) clientWith(cert *tls.Certificate) *http.Client {
	cfg := &tls.Config{RootCAs: p.pool, MinVersion: tls.VersionTLS12}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
}

// peerClientCert is a client certificate for cn that ca signs.
func peerClientCert(t *testing.T, ca testCA, cn string) *tls.Certificate {
	t.Helper()
	der, key := ca.issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: cn},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestPeerTrust runs two sharded replicas over https that trust each other through peer
// certificates: every answer through either equals the API servers (the fan-out carries the
// caller's identity, not its token), and identity headers are believed from a peer
// certificate only: not from a caller without one, nor from one another CA signed.
func TestPeerTrust(t *testing.T) {
	e, _ := newScaleEnv(t, 4)
	e.tls = newPeerPKI(t)
	e.client = e.tls.clientWith(nil)
	rs := []replica{e.start("r1"), e.start("r2")}
	// r2 takes its share once it has been live a lease duration.
	holders := e.settled("every member owned and synced", rs, nil, 2*time.Minute)
	deadline := time.Now().Add(6 * shardLease)
	for {
		holders = e.settled("every member owned and synced", rs, nil, 2*time.Minute)
		owners := map[string]bool{}
		for _, h := range holders {
			owners[h] = true
		}
		if len(owners) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("owners %v: one replica owns every member after %s, so nothing would fan out", holders, 6*shardLease)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("owners: %v", holders)
	e.equalTruth("through either replica, over peer trust", rs, time.Minute)
	// The clusters r2 took moved from r1, their caches handed over under the replicas' peer
	// certificates: each member was listed once, when it first started.
	if n := e.logMemberReads("from the start until r2 took its share", map[string]fleet.Reads{}, e.memberReads()); n > len(e.members) {
		t.Errorf("the members served %d full lists of %d clusters: a move listed its cluster again instead of taking the cache over", n, len(e.members))
	}

	owner := rs[0]
	if holders[e.members[0]] == "r2" {
		owner = rs[1]
	}
	ask := func(c *http.Client, headers map[string]string) int {
		t.Helper()
		req, _ := http.NewRequestWithContext(e.ctx, http.MethodGet, owner.d.URL+"/api/v1/configmaps", nil)
		req.Header.Set("X-Multicache-Peer", "1")
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
	claim := map[string]string{"X-Remote-User": "someone", "X-Remote-Group": "system:masters"}
	if code := ask(e.tls.clientWith(peerClientCert(t, e.tls.ca, "multicache-peer")), claim); code != http.StatusOK {
		t.Errorf("a peer's certificate vouching for a user: %d, want 200", code)
	}
	if code := ask(e.tls.clientWith(nil), claim); code != http.StatusUnauthorized {
		t.Errorf("identity headers without a client certificate: %d, want 401", code)
	}
	rogue := newTestCA(t, "rogue-ca")
	if code := ask(e.tls.clientWith(peerClientCert(t, rogue, "multicache-peer")), claim); code != http.StatusUnauthorized {
		t.Errorf("identity headers with a certificate another CA signed: %d, want 401", code)
	}
	if code := ask(e.tls.clientWith(peerClientCert(t, e.tls.ca, "multicache-peer")), nil); code != http.StatusUnauthorized {
		t.Errorf("a peer certificate naming no user: %d, want 401", code)
	}
}
