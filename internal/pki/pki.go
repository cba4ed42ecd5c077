package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"
)

// CA signs certificates.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
	// PEM is Cert, PEM-encoded.
	PEM []byte
}

// NewCA makes a self-signed CA named name, valid for validity from an hour ago.
func NewCA(name string, validity time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: name},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(validity), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// LoadCA reads a CA from its certificate and key, PEM-encoded.
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	cb, _ := pem.Decode(certPEM)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, errors.New("no PEM certificate")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, err
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("%s is not a CA certificate", cert.Subject)
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return nil, errors.New("no PEM key")
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		if ek, err2 := x509.ParseECPrivateKey(kb.Bytes); err2 == nil {
			k = ek
		} else {
			return nil, fmt.Errorf("key: %w", err)
		}
	}
	signer, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("key: a %T cannot sign", k)
	}
	return &CA{Cert: cert, Key: signer, PEM: certPEM}, nil
}

// KeyPEM is the CA's key, PKCS #8, PEM-encoded.
func (ca *CA) KeyPEM() ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(ca.Key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// Request is what a certificate is for.
type Request struct {
	CommonName string
	DNSNames   []string
	IPs        []net.IP
	// Server and Client are its extended key usages; a peer certificate has both.
	Server, Client bool
	// Validity from an hour ago; 0 is a year.
	Validity time.Duration
}

// Peer is the request of replica id's peer certificate: named id (common name and a DNS name),
// for both server and client use, and for whatever hosts and IPs it is also reached at.
func Peer(id string, hosts ...string) Request {
	r := Request{CommonName: id, DNSNames: []string{id}, Server: true, Client: true}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			r.IPs = append(r.IPs, ip)
		} else if h != id {
			r.DNSNames = append(r.DNSNames, h)
		}
	}
	return r
}

// Issue signs a new key's certificate for req; both come back PEM-encoded.
func (ca *CA) Issue(req Request) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, nil, err
	}
	validity := req.Validity
	if validity == 0 {
		validity = 365 * 24 * time.Hour
	}
	now := time.Now()
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: req.CommonName},
		DNSNames: req.DNSNames, IPAddresses: req.IPs, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(validity),
		KeyUsage: x509.KeyUsageDigitalSignature, BasicConstraintsValid: true}
	if req.Server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if req.Client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), nil
}

func serialNumber() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}
