package peer

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"sync"
	"time"
)

// Trust is how replicas prove to each other who they are. Every replica holds a certificate of
// its own (sharding.peerCertFile) that the peers' CA (sharding.peerCAFile) signed for both
// server and client use, and whose DNS names include the replica's identity. A replica:
//   - presents it as its serving certificate to a TLS client that asks for its identity by
//     server name (SNI), as its peers do (ServerConfig);
//   - presents it as its client certificate when it calls a peer, which then believes the
//     identity headers of the call (auth.PeerAuthenticator);
//   - calls a peer only over TLS with that peer's identity as the server name, so that the
//     call reaches the replica a Lease names or fails (Client);
//   - counts a peer Lease only once its advertised URL answered so (Verify).
//
// The identity in the certificate, not the address in the Lease, is what is trusted: anyone
// who may write a Lease can advertise any URL, but only the holder of a certificate the peer CA
// signed for an identity can answer as that replica.
type Trust struct {
	identity string
	cert     tls.Certificate
	leaf     *x509.Certificate
	cas      *x509.CertPool
	caCerts  []*x509.Certificate
	caPEM    []byte
}

// LoadTrust reads this replica's peer certificate and key and the peers' CA. identity is the
// replica's ID (sharding.identity); "" takes the certificate's common name. Every error names
// the setting at fault.
func LoadTrust(certFile, keyFile, caFile, identity string) (*Trust, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("sharding.peerCertFile: %w", err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("sharding.peerKeyFile: %w", err)
	}
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("sharding.peerCAFile: %w", err)
	}
	t, err := NewTrust(certPEM, keyPEM, caPEM, identity)
	if err != nil {
		return nil, err
	}
	return t, nil
}

// NewTrust is LoadTrust from PEM bytes.
func NewTrust(certPEM, keyPEM, caPEM []byte, identity string) (*Trust, error) {
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("sharding.peerCertFile, sharding.peerKeyFile: %w", err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("sharding.peerCertFile: %w", err)
	}
	cas, err := parseCerts(caPEM)
	if err != nil {
		return nil, fmt.Errorf("sharding.peerCAFile: %w", err)
	}
	pool := x509.NewCertPool()
	for _, c := range cas {
		pool.AddCert(c)
	}
	if identity == "" {
		identity = leaf.Subject.CommonName
	}
	if identity == "" {
		return nil, errors.New("sharding.identity: not set, and the peer certificate (sharding.peerCertFile) has no common name to take it from")
	}
	if !slices.Contains(leaf.DNSNames, identity) {
		return nil, fmt.Errorf("sharding.peerCertFile: the certificate's DNS names %v do not include this replica's identity %q: each replica needs a peer certificate of its own that names it", leaf.DNSNames, identity)
	}
	inter := x509.NewCertPool()
	for _, der := range cert.Certificate[1:] {
		if c, err := x509.ParseCertificate(der); err == nil {
			inter.AddCert(c)
		}
	}
	for _, use := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, DNSName: identity, KeyUsages: []x509.ExtKeyUsage{use}}); err != nil {
			what := "server"
			if use == x509.ExtKeyUsageClientAuth {
				what = "client"
			}
			return nil, fmt.Errorf("sharding.peerCertFile: not valid as a %s certificate signed by sharding.peerCAFile (a peer certificate serves both): %w", what, err)
		}
	}
	cert.Leaf = leaf
	return &Trust{identity: identity, cert: cert, leaf: leaf, cas: pool, caCerts: cas, caPEM: caPEM}, nil
}

// parseCerts reads every certificate of a PEM bundle; none is an error.
func parseCerts(b []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, errors.New("no PEM certificate in it")
	}
	return out, nil
}

// Identity is this replica's ID, as its certificate names it.
func (t *Trust) Identity() string { return t.identity }

// CAPEM is the peers' CA bundle, as read.
func (t *Trust) CAPEM() []byte { return t.caPEM }

// Overlaps reports which certificate of the bundle clientCAPEM (the callers' client CA,
// server.tls.clientCAFile) is also one of the peers' CAs: a caller's client certificate signed
// by it could then vouch for any user. "" when none is.
func (t *Trust) Overlaps(clientCAPEM []byte) string {
	client, err := parseCerts(clientCAPEM)
	if err != nil {
		return ""
	}
	for _, c := range client {
		for _, p := range t.caCerts {
			if bytes.Equal(c.Raw, p.Raw) {
				return c.Subject.String()
			}
		}
	}
	return ""
}

// ServerConfig is base (the daemon's serving TLS configuration, with its certificate) that
// presents this replica's peer certificate to a client that asks for the replica's identity as
// the server name: a peer that verifies it (Verify, Client).
func (t *Trust) ServerConfig(base *tls.Config) *tls.Config {
	cfg := base.Clone()
	next := cfg.GetCertificate
	cfg.GetCertificate = func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
		if hello.ServerName == t.identity {
			return &t.cert, nil
		}
		if next != nil {
			return next(hello)
		}
		return nil, nil // the configuration's own certificates
	}
	return cfg
}

// ClientConfig is the TLS configuration of a call to replica id: its certificate must be the
// peers' CA's and name id; this replica's own certificate is presented.
func (t *Trust) ClientConfig(id string) *tls.Config {
	return &tls.Config{ServerName: id, RootCAs: t.cas, Certificates: []tls.Certificate{t.cert}, MinVersion: tls.VersionTLS12}
}

// Verify proves that replica id answers at rawURL (its peer Lease's advertised URL): an https
// URL whose TLS server, asked for id, presents a certificate the peers' CA signed that names
// id. It is shard.Options.Verify.
func (t *Trust) Verify(ctx context.Context, id, rawURL string) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return fmt.Errorf("replica %q: advertised URL: %w", id, err)
	}
	if u.Scheme != "https" {
		return fmt.Errorf("replica %q advertises %s, not https: with peer certificates every replica is reached over TLS", id, u.Scheme)
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "443")
	}
	d := tls.Dialer{Config: t.ClientConfig(id)}
	conn, err := d.DialContext(ctx, "tcp", host)
	if err != nil {
		return fmt.Errorf("replica %q at %s: %w", id, u.Host, err)
	}
	return conn.Close()
}

// Clients makes the HTTP clients of calls to peers: one per peer ID, over TLS to that identity
// (Trust.ClientConfig) when there is a Trust, plain otherwise (auth off, loopback). Every
// call's wait for the answer's headers is bounded by Timeout.
type Clients struct {
	trust   *Trust
	timeout time.Duration
	mu      sync.Mutex
	byID    map[string]*http.Client
	// older remembers, by replica and URL, the older envelope version a replica refused this
	// release's calls in favour of (a rolling update from the previous release), and when.
	older map[peerAt]olderPeer
	now   func() time.Time // time.Now; a test's clock
}

// peerAt is a replica at its advertised URL.
type peerAt struct{ id, url string }

// olderPeer is an older envelope version a replica speaks, as learned at a time.
type olderPeer struct {
	version string
	at      time.Time
}

// rememberOlder is how long calls to a replica that refused this release's envelope go in
// the older version it named first, without the refused call: while a rolling update from
// the previous release lasts, each call costs that replica one call, not two (and one refused
// call a minute). A replica updated in place (the same name and URL) says so in its answers
// (NewestProtocolHeader), and one that answers in another version is not that replica any
// more: either is forgotten, and called in this release's version from then on.
const rememberOlder = time.Minute

// NewClients makes the clients. trust may be nil; timeout 0 sets no bound.
func NewClients(trust *Trust, timeout time.Duration) *Clients {
	return &Clients{trust: trust, timeout: timeout, byID: map[string]*http.Client{}, older: map[peerAt]olderPeer{}, now: time.Now}
}

// olderOf is the older envelope version replica id at url was last found to speak, within
// rememberOlder; "" when none.
func (c *Clients) olderOf(id, url string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	o, ok := c.older[peerAt{id, url}]
	if !ok || c.now().Sub(o.at) > rememberOlder {
		return ""
	}
	return o.version
}

// noteOlder records that replica id at url refused this release's envelope naming version v,
// and forgets what is older than rememberOlder.
func (c *Clients) noteOlder(id, url, v string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	for k, o := range c.older {
		if now.Sub(o.at) > rememberOlder {
			delete(c.older, k)
		}
	}
	c.older[peerAt{id, url}] = olderPeer{version: v, at: now}
}

// forgetOlder forgets what noteOlder recorded of replica id at url.
func (c *Clients) forgetOlder(id, url string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.older, peerAt{id, url})
}

// Trusted reports whether calls go over peer certificates.
func (c *Clients) Trusted() bool { return c != nil && c.trust != nil }

// Trust is the Trust the clients call with, nil when none.
func (c *Clients) Trust() *Trust { return c.trust }

// For is the client of calls to replica id.
func (c *Clients) For(id string) *http.Client {
	key := id
	if c.trust == nil {
		key = "" // one plain client for every peer
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if hc, ok := c.byID[key]; ok {
		return hc
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 32
	tr.ResponseHeaderTimeout = c.timeout
	// Replicas answer each other uncompressed: a fan-out's page would otherwise be gzipped and
	// gunzipped at every hop, CPU the replicas, side by side, are shorter of than bandwidth.
	tr.DisableCompression = true
	if c.trust != nil {
		tr.TLSClientConfig = c.trust.ClientConfig(id)
	}
	hc := &http.Client{Transport: tr}
	c.byID[key] = hc
	return hc
}
