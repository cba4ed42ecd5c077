package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// testCA is a CA that signs client certificates, for tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// client signs a client certificate for cn.
func (ca *testCA) client(t *testing.T, cn string) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: cn}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return cert
}

// peerRequest is a request that presents cert (none when nil) and names user and groups.
func peerRequest(cert *x509.Certificate, name string, groups ...string) *http.Request {
	r, _ := http.NewRequest(http.MethodGet, "https://replica/api/v1/pods", nil)
	if cert != nil {
		r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}
	}
	if name != "" {
		r.Header.Set(PeerUserHeader, name)
	}
	for _, g := range groups {
		r.Header.Add(PeerGroupHeader, g)
	}
	return r
}

// TestPeerAuthenticator: identity headers are believed from a client certificate the peer CA
// signed, and from nothing else: no certificate, or one another CA signed.
func TestPeerAuthenticator(t *testing.T) {
	peers, other := newTestCA(t, "peer-ca"), newTestCA(t, "other-ca")
	pa, err := PeerAuthenticator(peers.pem, []string{"multicache-peer"})
	if err != nil {
		t.Fatal(err)
	}
	resp, ok, err := pa.AuthenticateRequest(peerRequest(peers.client(t, "multicache-peer"), "alice", "dev", "ops"))
	if err != nil || !ok || resp.User.GetName() != "alice" || !slices.Equal(resp.User.GetGroups(), []string{"dev", "ops"}) {
		t.Fatalf("a peer's request naming alice: %+v, %v, %v", resp, ok, err)
	}
	if _, ok, _ := pa.AuthenticateRequest(peerRequest(nil, "alice")); ok {
		t.Error("headers without a client certificate were believed")
	}
	if _, ok, _ := pa.AuthenticateRequest(peerRequest(other.client(t, "multicache-peer"), "alice")); ok {
		t.Error("headers with a certificate another CA signed were believed")
	}
	if _, ok, _ := pa.AuthenticateRequest(peerRequest(peers.client(t, "multicache-peer"), "")); ok {
		t.Error("a peer's request naming nobody was authenticated")
	}
	// The peer CA may sign other certificates (a serving certificate without usages is valid
	// for client auth too): only the peers' name is trusted.
	if _, ok, _ := pa.AuthenticateRequest(peerRequest(peers.client(t, "someone-else"), "alice")); ok {
		t.Error("headers with a certificate for another name were believed")
	}
	// Everything SetPeerIdentity names comes back: UID, and extra keys that hold '/' and '.'.
	alice := &user.DefaultInfo{Name: "alice", UID: "uid-1", Groups: []string{"dev"}, Extra: map[string][]string{
		"authentication.kubernetes.io/credential-id": {"JTI=abc"}, "scopes.example.com": {"read", "list"}}}
	r := peerRequest(peers.client(t, "multicache-peer"), "")
	SetPeerIdentity(r.Header, alice)
	resp, ok, err = pa.AuthenticateRequest(r)
	if err != nil || !ok || resp.User.GetName() != "alice" || resp.User.GetUID() != "uid-1" ||
		!slices.Equal(resp.User.GetGroups(), []string{"dev"}) || !reflect.DeepEqual(resp.User.GetExtra(), alice.Extra) {
		t.Errorf("SetPeerIdentity's alice came back as %+v (%v, %v)", resp, ok, err)
	}
	if _, err := PeerAuthenticator([]byte("not a certificate"), nil); err == nil {
		t.Error("a peer CA that holds no certificate was accepted")
	}
	// Without names (every replica has a certificate of its own), any certificate the peer CA
	// signed vouches; still none another CA signed.
	any, err := PeerAuthenticator(peers.pem, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp, ok, err := any.AuthenticateRequest(peerRequest(peers.client(t, "replica-7"), "alice")); err != nil || !ok || resp.User.GetName() != "alice" {
		t.Errorf("a replica's own certificate vouching for alice: %+v, %v, %v", resp, ok, err)
	}
	if _, ok, _ := any.AuthenticateRequest(peerRequest(other.client(t, "replica-7"), "alice")); ok {
		t.Error("without names, headers with a certificate another CA signed were believed")
	}
}

// TestAccessForAsksAboutTheUser: what a user a peer vouches for may read is asked of the
// management cluster for that user, as for a caller of this replica.
func TestAccessForAsksAboutTheUser(t *testing.T) {
	// The management cluster's SubjectAccessReview endpoint: alice may read fleet-1 only.
	var mu sync.Mutex
	var asked []authorizationv1.SubjectAccessReviewSpec
	mgmt := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var sar authorizationv1.SubjectAccessReview
		if r.URL.Path != "/apis/authorization.k8s.io/v1/subjectaccessreviews" || json.NewDecoder(r.Body).Decode(&sar) != nil {
			http.Error(w, "not a SubjectAccessReview", http.StatusNotFound)
			return
		}
		mu.Lock()
		asked = append(asked, sar.Spec)
		mu.Unlock()
		ra := sar.Spec.ResourceAttributes
		sar.Status.Allowed = sar.Spec.User == "alice" && ra != nil && ra.Name == "fleet-1"
		sar.APIVersion, sar.Kind = "authorization.k8s.io/v1", "SubjectAccessReview"
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(&sar)
	}))
	t.Cleanup(mgmt.Close)
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: mgmt.URL})
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(Options{Client: cs})
	if err != nil {
		t.Fatal(err)
	}
	var ua UserAuthorizer = d
	a := ua.AccessFor(&user.DefaultInfo{Name: "alice", Groups: []string{"dev"}})
	ok, err := a.Cluster(context.Background(), "fleet-1", false)
	if err != nil || !ok {
		t.Fatalf("alice on fleet-1: %v, %v", ok, err)
	}
	if ok, _ := a.Cluster(context.Background(), "fleet-2", false); ok {
		t.Error("alice may read fleet-2, which the management cluster denies")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(asked) == 0 || asked[0].User != "alice" || !slices.Equal(asked[0].Groups, []string{"dev"}) {
		t.Errorf("reviews asked: %+v, want them about alice in dev", asked)
	}
	if u := a.(interface{ User() user.Info }).User(); u.GetName() != "alice" {
		t.Errorf("the access's user is %q, want alice (peers are told it)", u.GetName())
	}
}
