package e2e

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/multicache/multicache/test/harness"
)

// testCA is a throwaway certificate authority.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T, cn string) testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue signs tmpl (valid for an hour either side of now) for a new key.
func (ca testCA) issue(t *testing.T, tmpl *x509.Certificate) ([]byte, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber = big.NewInt(time.Now().UnixNano())
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return der, key
}

// selfSignedCA writes a CA and a serving certificate for 127.0.0.1 signed by it into dir and
// returns the paths of the CA, the certificate and its key.
func selfSignedCA(t *testing.T, dir string) (caPath, certPath, keyPath string) {
	t.Helper()
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	ca := newTestCA(t, "multicache-e2e-ca")
	der, key := ca.issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	keyDER, err := x509.MarshalECPrivateKey(key)
	must(err)
	caPath, certPath, keyPath = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	must(os.WriteFile(caPath, ca.pem, 0o600))
	must(os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	must(os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600))
	return caPath, certPath, keyPath
}

// TestTLS serves over https with a certificate from server.tls, and checks that the API and
// the CLI reach it with the CA, and that nothing reaches it without.
func TestTLS(t *testing.T) {
	env := harness.Start(t, harness.Options{Clusters: 1})
	ctx, f := env.Ctx, env.Fleet
	dir := t.TempDir()
	caPath, certPath, keyPath := selfSignedCA(t, dir)
	cfg := filepath.Join(dir, "multicache.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("server:\n  tls: {certFile: %q, keyFile: %q}\n", certPath, keyPath)), 0o600); err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	caPEM, _ := os.ReadFile(caPath)
	pool.AppendCertsFromPEM(caPEM)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	addr := harness.FreePort(t)
	d := harness.StartDaemonAt(t, "https", client, addr, "--config", cfg, "--kubeconfig", f.Kubeconfig(), "--resource", "namespaces")

	var clusters map[string]any
	if code, e, err := d.Get(ctx, "/multicache/v1/clusters", nil, &clusters); err != nil || code != 200 {
		t.Fatalf("https with the CA: %d %+v %v", code, e, err)
	}
	// Plain HTTP on the TLS port gets Go's 400, never an answer.
	if resp, err := http.Get("http://" + addr + "/multicache/v1/clusters"); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("plain http on the https port: %d, want 400", resp.StatusCode)
		}
	}
	// Without the CA the certificate is not trusted.
	if _, err := http.Get(d.URL + "/multicache/v1/clusters"); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("https without the CA: %v, want a certificate error", err)
	}
	out, err := exec.Command(harness.Binary(t), "clusters", "--server", d.URL, "--certificate-authority", caPath).CombinedOutput()
	if err != nil || !strings.Contains(string(out), f.Names()[0]) {
		t.Errorf("CLI with --certificate-authority: %v\n%s", err, out)
	}
	out, err = exec.Command(harness.Binary(t), "clusters", "--server", d.URL).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "certificate") {
		t.Errorf("CLI without the CA: %v\n%s", err, out)
	}
	out, err = exec.Command(harness.Binary(t), "clusters", "--server", d.URL, "--certificate-authority", keyPath).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--certificate-authority") {
		t.Errorf("CLI with a CA file that holds no certificate: %v\n%s", err, out)
	}

	t.Run("clusters --watch prints again when the fleet changes, and stops on SIGINT", func(t *testing.T) {
		cmd := exec.Command(harness.Binary(t), "clusters", "--watch", "--interval", "200ms", "--server", d.URL, "--certificate-authority", caPath)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cmd.Process.Kill() }()
		lines := make(chan string, 100)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		// objects reads one block (a "--- time" header, then rows) and returns the namespaces
		// row's object count.
		objects := func() int {
			deadline := time.After(30 * time.Second)
			for {
				select {
				case l, ok := <-lines:
					if !ok {
						t.Fatalf("watch output ended")
					}
					if f := strings.Fields(l); len(f) >= 4 && f[1] == "namespaces" {
						n, _ := strconv.Atoi(f[3])
						return n
					}
				case <-deadline:
					t.Fatal("no namespaces row in 30s")
				}
			}
		}
		before := objects()
		cs, _ := f.Clientset(f.Names()[0])
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "watch-cli"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if after := objects(); after != before+1 {
			t.Errorf("after a namespace was created the watch printed %d namespaces, want %d", after, before+1)
		}
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("clusters --watch exited with %v on SIGINT, want 0", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("clusters --watch still running 10s after SIGINT")
		}
	})
}
