package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/multicache/multicache/test/fleet"
)

// peerPKI is what sharded replicas are started with: a peer CA that signs their serving
// certificate (for 127.0.0.1, how the tests reach them) and each replica's own peer certificate
// (its ID as a DNS name, for server and client use), and the config that names them.
type peerPKI struct {
	t    *testing.T
	dir  string
	ca   testCA
	cfg  string // config file with server.tls
	pool *x509.CertPool
}

func newPeerPKI(t *testing.T) *peerPKI {
	t.Helper()
	p := &peerPKI{t: t, dir: t.TempDir(), ca: newTestCA(t, "multicache-peer-ca")}
	der, key := p.ca.issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "127.0.0.1"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	servingCert, servingKey := p.write("serving", der, key)
	caPath := filepath.Join(p.dir, "ca.crt")
	if err := os.WriteFile(caPath, p.ca.pem, 0o600); err != nil {
		t.Fatal(err)
	}
	p.cfg = filepath.Join(p.dir, "multicache.yaml")
	if err := os.WriteFile(p.cfg, []byte(fmt.Sprintf("server:\n  tls: {certFile: %q, keyFile: %q}\nresources: [{name: %s}]\n", servingCert, servingKey, scaleResource)), 0o600); err != nil {
		t.Fatal(err)
	}
	p.pool = x509.NewCertPool()
	p.pool.AppendCertsFromPEM(p.ca.pem)
	return p
}

// write writes a certificate and its key into the PKI's directory.
func (p *peerPKI) write(name string, der []byte, key any) (string, string) {
	p.t.Helper()
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		p.t.Fatal(err)
	}
	c, k := filepath.Join(p.dir, name+".crt"), filepath.Join(p.dir, name+".key")
	for path, b := range map[string][]byte{c: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), k: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})} {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			p.t.Fatal(err)
		}
	}
	return c, k
}

// args are the flags of replica id: the config, its own peer certificate, the peer CA.
func (p *peerPKI) args(id string) []string {
	p.t.Helper()
	der, key := p.ca.issue(p.t, &x509.Certificate{Subject: pkix.Name{CommonName: id}, DNSNames: []string{id},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}})
	cert, key2 := p.write("peer-"+id, der, key)
	return []string{"--config", p.cfg, "--peer-cert-file", cert, "--peer-key-file", key2, "--peer-ca-file", filepath.Join(p.dir, "ca.crt")}
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
	rs := []replica{e.start("r1"), e.start("r2")}
	// r2 takes its share once it has been live a lease duration.
	var holders map[string]string
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
	e.labelSome()
	e.summaryEqualsTruth(rs, time.Minute)
	e.summaryRefusals(rs[0])
	e.learnedIndexes(rs)
	e.whereFilters(rs, holders)
	e.sortedLists(rs, time.Minute)
	e.summaryStreams(rs)
	// The learned indexes followed the relabelling and the creates and deletes since.
	e.summaryEqualsTruth(rs, time.Minute)
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
	// A pre-envelope release's call for a replica's part (X-Multicache-Peer on the API's own
	// path) is refused once authenticated: this release would answer it with the whole fleet.
	// Without a certificate, the header skips nothing: 401.
	oldCall := map[string]string{"X-Remote-User": "someone", "X-Remote-Group": "system:masters", "X-Multicache-Peer": "1"}
	if code := ask(e.tls.clientWith(peerClientCert(t, e.tls.ca, "multicache-peer")), oldCall); code != http.StatusServiceUnavailable {
		t.Errorf("a pre-envelope replica's part call: %d, want 503", code)
	}
	if code := ask(e.tls.clientWith(nil), oldCall); code != http.StatusUnauthorized {
		t.Errorf("X-Multicache-Peer and identity headers without a client certificate: %d, want 401", code)
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

// TestForgedPeerLease writes a peer Lease in the replicas' own shape, renewed, at the largest
// weight, that advertises a loopback listener of the attacker's (over https, with a
// certificate for the forged name that another CA signed), and a fence that names the forged
// replica. The honest replicas, with tokens and peer certificates (the secure default), keep
// serving every cluster equal to the API servers, through fan-outs, watches and a handover
// (one replica stops), and the listener receives no request at all: no token, no identity.
func TestForgedPeerLease(t *testing.T) {
	e, _ := newScaleEnv(t, 4)
	var mu sync.Mutex
	var heard []string
	rogue := newTestCA(t, "rogue-ca")
	der, key := rogue.issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "forged"}, DNSNames: []string{"forged"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}})
	listener := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		heard = append(heard, fmt.Sprintf("%s %s Authorization=%q X-Remote-User=%q", r.Method, r.URL, r.Header.Get("Authorization"), r.Header.Get("X-Remote-User")))
		mu.Unlock()
		http.NotFound(w, r)
	}))
	listener.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	listener.StartTLS()
	t.Cleanup(listener.Close)

	leases := e.mgmt.CoordinationV1().Leases(shardNS)
	forge := func() {
		now := metav1.NewMicroTime(time.Now())
		holder, secs := "forged", int32(shardLease.Seconds())
		if l, err := leases.Get(e.ctx, "multicache-peer-forged", metav1.GetOptions{}); err == nil {
			l.Spec.RenewTime = &now
			_, _ = leases.Update(e.ctx, l, metav1.UpdateOptions{})
			return
		}
		_, _ = leases.Create(e.ctx, &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "multicache-peer-forged", Labels: map[string]string{"multicache.io/lease": "peer"},
			Annotations: map[string]string{"multicache.io/advertise-url": listener.URL, "multicache.io/weight": "100"}},
			Spec: coordv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &secs, RenewTime: &now}}, metav1.CreateOptions{})
	}
	forge()
	fctx, stop := context.WithCancel(e.ctx)
	defer stop()
	go func() {
		for fctx.Err() == nil {
			forge()
			time.Sleep(shardLease / 4)
		}
	}()

	rs := []replica{e.start("r1"), e.start("r2")}
	e.settled("every member owned by r1 or r2 and synced", rs, map[string]bool{"forged": true}, 2*time.Minute)
	// The forger takes a fence: the owner takes it back.
	fences, err := leases.List(e.ctx, metav1.ListOptions{LabelSelector: "multicache.io/lease=fence"})
	if err != nil || len(fences.Items) == 0 {
		t.Fatalf("fences: %v", err)
	}
	f := fences.Items[0]
	forged := "forged"
	f.Spec.HolderIdentity = &forged
	if _, err := leases.Update(e.ctx, &f, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.settled("the forged fence taken back", rs, map[string]bool{"forged": true}, 2*time.Minute)
	e.equalTruth("with a forged peer Lease", rs, time.Minute)
	// Watches through both, and a handover: r1 stops, r2 takes its clusters.
	for _, r := range rs {
		e.rawWatch(r)
	}
	if err := rs[0].d.Stop(t); err != nil {
		t.Errorf("r1: SIGTERM: %v", err)
	}
	e.settled("r2 holds every member", rs[1:], map[string]bool{"forged": true, "r1": true}, 2*time.Minute)
	e.equalTruth("after r1 left", rs[1:], time.Minute)
	mu.Lock()
	defer mu.Unlock()
	if len(heard) > 0 {
		t.Errorf("the forged peer's listener received %d requests, e.g. %v", len(heard), heard[:min(5, len(heard))])
	}
}
