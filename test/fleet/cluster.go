package fleet

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Cluster is one etcd plus one kube-apiserver (plus, optionally, kube-controller-manager).
type Cluster struct {
	Name              string `json:"name"`
	Dir               string `json:"dir"`
	BinDir            string `json:"binDir"`
	APIPort           int    `json:"apiPort"`
	EtcdPort          int    `json:"etcdPort"`
	EtcdPeerPort      int    `json:"etcdPeerPort"`
	ControllerManager bool   `json:"controllerManager"`
	// ExtraArgs are appended to kube-apiserver's flags.
	ExtraArgs []string `json:"extraArgs,omitempty"`
	// AuditReads logs every list and watch request to audit.log in Dir (ReadsBy).
	AuditReads bool `json:"auditReads,omitempty"`
	// Token is the current ServiceAccount token of the revocable admin identity.
	Token string `json:"token"`

	Etcd      *proc `json:"etcd"`
	APIServer *proc `json:"apiserver"`
	CM        *proc `json:"controllerManagerProc,omitempty"`

	fleet *Fleet
}

const (
	systemNamespace = "multicache-system"
	adminSA         = "fleet-admin"
	tokenTTL        = 48 * time.Hour
)

// URL is the API server's https URL on loopback.
func (c *Cluster) URL() string { return "https://127.0.0.1:" + strconv.Itoa(c.APIPort) }

// EtcdURL is etcd's client URL on loopback.
func (c *Cluster) EtcdURL() string { return "http://127.0.0.1:" + strconv.Itoa(c.EtcdPort) }

func (c *Cluster) pki() *pki {
	d := c.Dir
	return &pki{
		CACert: filepath.Join(d, "ca.crt"), CAKey: filepath.Join(d, "ca.key"),
		ServingCert: filepath.Join(d, "serving.crt"), ServingKey: filepath.Join(d, "serving.key"),
		AdminCert: filepath.Join(d, "admin.crt"), AdminKey: filepath.Join(d, "admin.key"),
		LimitedCert: filepath.Join(d, "limited.crt"), LimitedKey: filepath.Join(d, "limited.key"),
		SAPub: filepath.Join(d, "sa.pub"), SAKey: filepath.Join(d, "sa.key"),
	}
}

// Config is the rest.Config of the revocable token identity, as the kubeconfig carries it.
func (c *Cluster) Config() *rest.Config {
	return &rest.Config{
		Host:            c.URL(),
		BearerToken:     c.Token,
		TLSClientConfig: rest.TLSClientConfig{CAFile: c.pki().CACert},
	}
}

// LimitedConfig is the rest.Config of the RBAC-restricted identity.
func (c *Cluster) LimitedConfig() *rest.Config {
	p := c.pki()
	return &rest.Config{
		Host:            c.URL(),
		TLSClientConfig: rest.TLSClientConfig{CAFile: p.CACert, CertFile: p.LimitedCert, KeyFile: p.LimitedKey},
	}
}

// bindAttempts bounds how often a fresh start picks new ports after a server could not bind.
const bindAttempts = 3

func (c *Cluster) start(ctx context.Context, timeout time.Duration) error {
	if err := os.MkdirAll(c.Dir, 0o700); err != nil {
		return err
	}
	if _, err := newPKI(c.Dir); err != nil {
		return fmt.Errorf("cluster %q: certificates: %w", c.Name, err)
	}
	if err := c.ensureExecToken(); err != nil {
		return err
	}
	// A port chosen free can still be taken before the server binds it (another test's choice
	// of the same port). On a fresh start nothing depends on the port yet, so such a failure
	// picks new ports and tries again.
	for attempt := 1; ; attempt++ {
		err := c.StartEtcd(ctx)
		if err == nil {
			break
		}
		if !addrInUse(err) || attempt == bindAttempts {
			return err
		}
		// A fresh data dir and log: the next attempt's failure is its own.
		if err := errors.Join(os.RemoveAll(filepath.Join(c.Dir, "etcd")), os.RemoveAll(filepath.Join(c.Dir, "etcd.log"))); err != nil {
			return err
		}
		ports, perr := FreePorts(2)
		if perr != nil {
			return errors.Join(err, perr)
		}
		c.EtcdPort, c.EtcdPeerPort = ports[0], ports[1]
	}
	for attempt := 1; ; attempt++ {
		err := c.startAPIServer(ctx, timeout)
		if err == nil {
			break
		}
		if !addrInUse(err) || attempt == bindAttempts {
			return err
		}
		ports, perr := FreePorts(1)
		if perr != nil {
			return errors.Join(err, perr)
		}
		if err := os.RemoveAll(filepath.Join(c.Dir, "kube-apiserver.log")); err != nil {
			return err
		}
		c.APIPort = ports[0]
	}
	if err := c.bootstrap(ctx); err != nil {
		return fmt.Errorf("cluster %q: bootstrap: %w", c.Name, err)
	}
	if c.ControllerManager {
		if err := c.startControllerManager(); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) etcdArgs() []string {
	peer := "http://127.0.0.1:" + strconv.Itoa(c.EtcdPeerPort)
	return []string{
		"--name=" + c.Name,
		"--data-dir=" + filepath.Join(c.Dir, "etcd"),
		"--listen-client-urls=" + c.EtcdURL(),
		"--advertise-client-urls=" + c.EtcdURL(),
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=" + c.Name + "=" + peer,
		"--listen-metrics-urls=",
		"--unsafe-no-fsync",
		"--quota-backend-bytes=8589934592",
		"--log-level=warn",
	}
}

// StartEtcd starts etcd on its recorded ports and data dir and waits for /health.
func (c *Cluster) StartEtcd(ctx context.Context) error {
	if c.Etcd.alive() {
		return fmt.Errorf("cluster %q: etcd already running (pid %d)", c.Name, c.Etcd.PID)
	}
	p, err := startProc(filepath.Join(c.BinDir, "etcd"), c.etcdArgs(), filepath.Join(c.Dir, "etcd.log"), c.detach())
	if err != nil {
		return fmt.Errorf("cluster %q: %w", c.Name, err)
	}
	c.Etcd = p
	hc := &http.Client{Timeout: 2 * time.Second}
	err = poll(ctx, 60*time.Second, func() (bool, error) {
		if err := p.exitedEarly(); err != nil {
			return false, err
		}
		resp, err := hc.Get(c.EtcdURL() + "/health")
		if err != nil {
			return false, nil
		}
		defer resp.Body.Close()
		var h struct{ Health string }
		_ = json.NewDecoder(resp.Body).Decode(&h)
		if h.Health != "true" {
			return false, nil
		}
		// Another process's etcd on the same port would answer too, while ours fails to
		// bind and exits: ours must still be running a moment later.
		time.Sleep(100 * time.Millisecond)
		return true, p.exitedEarly()
	})
	if err != nil {
		return fmt.Errorf("cluster %q: etcd not healthy: %w", c.Name, err)
	}
	return c.saveState()
}

// KillEtcd kills etcd with SIGKILL, as a crash would. Its data stays.
func (c *Cluster) KillEtcd() error {
	if err := c.Etcd.kill(); err != nil {
		return fmt.Errorf("cluster %q: %w", c.Name, err)
	}
	return nil
}

func (c *Cluster) apiserverArgs() []string {
	p := c.pki()
	return append([]string{
		"--etcd-servers=" + c.EtcdURL(),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(c.APIPort),
		"--cert-dir=" + filepath.Join(c.Dir, "apiserver-certs"),
		"--tls-cert-file=" + p.ServingCert,
		"--tls-private-key-file=" + p.ServingKey,
		"--client-ca-file=" + p.CACert,
		// The exec token (ExecTokenFile): what the test exec credential plugin hands out.
		"--token-auth-file=" + c.execTokenCSVFile(),
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + p.SAPub,
		"--service-account-signing-key-file=" + p.SAKey,
		"--service-cluster-ip-range=10.96.0.0/16",
		"--authorization-mode=RBAC",
		// No controller-manager creates the `default` ServiceAccount by default, so this admission
		// plugin would reject every Pod.
		"--disable-admission-plugins=ServiceAccount",
		"--allow-privileged=true",
		"--profiling=false",
		"--endpoint-reconciler-type=none",
		"--v=0",
	}, append(c.auditArgs(), c.ExtraArgs...)...)
}

// StartAPIServer starts the API server again on its recorded port and etcd, and waits for
// /readyz. The data in etcd is untouched.
func (c *Cluster) StartAPIServer(ctx context.Context) error {
	return c.startAPIServer(ctx, 2*time.Minute)
}

func (c *Cluster) startAPIServer(ctx context.Context, timeout time.Duration) error {
	if c.APIServer.alive() {
		return fmt.Errorf("cluster %q: kube-apiserver already running (pid %d)", c.Name, c.APIServer.PID)
	}
	if c.AuditReads {
		if err := os.WriteFile(filepath.Join(c.Dir, "audit-policy.yaml"), []byte(auditPolicy), 0o600); err != nil {
			return fmt.Errorf("cluster %q: audit policy: %w", c.Name, err)
		}
	}
	// Already there after start; a cluster recorded before it had an exec token gets one here.
	// The token itself never changes once written.
	if err := c.ensureExecToken(); err != nil {
		return err
	}
	p, err := startProc(filepath.Join(c.BinDir, "kube-apiserver"), c.apiserverArgs(), filepath.Join(c.Dir, "kube-apiserver.log"), c.detach())
	if err != nil {
		return fmt.Errorf("cluster %q: %w", c.Name, err)
	}
	c.APIServer = p
	if err := c.saveState(); err != nil {
		return err
	}
	if err := c.WaitReady(ctx, timeout); err != nil {
		return err
	}
	return nil
}

// WaitReady polls /readyz until it answers 200.
func (c *Cluster) WaitReady(ctx context.Context, timeout time.Duration) error {
	tr, err := c.adminTransport()
	if err != nil {
		return err
	}
	hc := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	var last string
	err = poll(ctx, timeout, func() (bool, error) {
		if err := c.APIServer.exitedEarly(); err != nil {
			return false, err
		}
		resp, err := hc.Get(c.URL() + "/readyz")
		if err != nil {
			last = err.Error()
			return false, nil
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		last = fmt.Sprintf("%d %s", resp.StatusCode, bytes.TrimSpace(b))
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return fmt.Errorf("cluster %q: kube-apiserver not ready (last: %.300s): %w", c.Name, last, err)
	}
	return nil
}

// StopAPIServer stops the API server gracefully (SIGTERM, then SIGKILL after 20 s). etcd and
// its data stay.
func (c *Cluster) StopAPIServer() error {
	if err := c.APIServer.stop(20 * time.Second); err != nil {
		return fmt.Errorf("cluster %q: %w", c.Name, err)
	}
	return nil
}

// KillAPIServer kills the API server with SIGKILL, as a crash would. etcd and its data stay.
func (c *Cluster) KillAPIServer() error {
	if err := c.APIServer.kill(); err != nil {
		return fmt.Errorf("cluster %q: %w", c.Name, err)
	}
	return nil
}

func (c *Cluster) startControllerManager() error {
	kc := filepath.Join(c.Dir, "admin.kubeconfig")
	p := c.pki()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: c.URL(), CertificateAuthority: p.CACert}
	cfg.AuthInfos["c"] = &clientcmdapi.AuthInfo{ClientCertificate: p.AdminCert, ClientKey: p.AdminKey}
	cfg.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "c"}
	cfg.CurrentContext = "c"
	if err := clientcmd.WriteToFile(*cfg, kc); err != nil {
		return err
	}
	args := []string{
		"--kubeconfig=" + kc,
		"--bind-address=127.0.0.1",
		"--secure-port=0",
		"--leader-elect=false",
		"--service-account-private-key-file=" + p.SAKey,
		"--root-ca-file=" + p.CACert,
		"--use-service-account-credentials=false",
		"--controllers=*,-nodeipam,-nodelifecycle,-cloud-node-lifecycle,-service-lb-controller,-route,-persistentvolume-binder,-attachdetach,-csrsigning,-csrapproving,-bootstrapsigner,-tokencleaner",
		"--v=0",
	}
	pr, err := startProc(filepath.Join(c.BinDir, "kube-controller-manager"), args, filepath.Join(c.Dir, "kube-controller-manager.log"), c.detach())
	if err != nil {
		return fmt.Errorf("cluster %q: %w", c.Name, err)
	}
	c.CM = pr
	return c.saveState()
}

func (c *Cluster) stopAll() error {
	var errs []error
	if err := c.CM.stop(10 * time.Second); err != nil {
		errs = append(errs, err)
	}
	if err := c.APIServer.stop(20 * time.Second); err != nil {
		errs = append(errs, err)
	}
	if err := c.Etcd.stop(10 * time.Second); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cluster %q: %w", c.Name, err)
	}
	return nil
}

func (c *Cluster) detach() bool { return c.fleet != nil && c.fleet.Detach }

func (c *Cluster) saveState() error {
	if c.fleet == nil || c.fleet.starting {
		return nil
	}
	if _, err := os.Stat(c.fleet.Dir); err != nil {
		return nil
	}
	return c.fleet.save()
}

func (c *Cluster) adminTransport() (http.RoundTripper, error) {
	p := c.pki()
	ca, err := os.ReadFile(p.CACert)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	cert, err := tls.LoadX509KeyPair(p.AdminCert, p.AdminKey)
	if err != nil {
		return nil, err
	}
	return &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}}, nil
}

// bootstrap creates the revocable admin ServiceAccount and its token, and the limited user's RBAC.
func (c *Cluster) bootstrap(ctx context.Context) error {
	cs, err := kubernetes.NewForConfig(c.AdminConfig())
	if err != nil {
		return err
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: systemNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "fleet-admin"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: adminSA, Namespace: systemNamespace}},
	}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: LimitedUser},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"pods", "nodes", "namespaces", "services", "serviceaccounts", "events"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{"apps", "apiextensions.k8s.io", "example.multicache.io", "rbac.authorization.k8s.io"}, Resources: []string{"*"}, Verbs: []string{"get", "list", "watch"}},
		},
	}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: LimitedUser},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: LimitedUser},
		Subjects:   []rbacv1.Subject{{Kind: "User", Name: LimitedUser, APIGroup: "rbac.authorization.k8s.io"}},
	}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return c.issueToken(ctx, cs)
}

// issueToken (re)creates the admin ServiceAccount and requests a bound token for it.
func (c *Cluster) issueToken(ctx context.Context, cs kubernetes.Interface) error {
	if _, err := cs.CoreV1().ServiceAccounts(systemNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: adminSA}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	ttl := int64(tokenTTL.Seconds())
	tr, err := cs.CoreV1().ServiceAccounts(systemNamespace).CreateToken(ctx, adminSA, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &ttl},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("token for %s/%s: %w", systemNamespace, adminSA, err)
	}
	c.Token = tr.Status.Token
	return nil
}

// Revoke deletes the ServiceAccount behind the kubeconfig's token: from then on every request
// made with it is 401 Unauthorized. The kubeconfig is left as it is.
func (c *Cluster) Revoke(ctx context.Context) error {
	cs, err := kubernetes.NewForConfig(c.AdminConfig())
	if err != nil {
		return err
	}
	err = cs.CoreV1().ServiceAccounts(systemNamespace).Delete(ctx, adminSA, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("cluster %q: revoke: %w", c.Name, err)
	}
	return nil
}

// Restore gives the admin identity a new ServiceAccount and token and rewrites the kubeconfig
// with it (atomically), as a credential rotation does.
func (c *Cluster) Restore(ctx context.Context) error {
	cs, err := kubernetes.NewForConfig(c.AdminConfig())
	if err != nil {
		return err
	}
	if err := c.issueToken(ctx, cs); err != nil {
		return fmt.Errorf("cluster %q: restore: %w", c.Name, err)
	}
	if c.fleet == nil {
		return nil
	}
	if err := c.fleet.writeKubeconfigs(); err != nil {
		return err
	}
	return c.fleet.save()
}

// Compact compacts etcd at its current revision, discarding all history before it: a watch
// resumed from an older resourceVersion can no longer be served from etcd. It returns the
// revision compacted at. It speaks etcd's JSON gateway, so no etcd client is needed.
func (c *Cluster) Compact(ctx context.Context) (int64, error) {
	var rng struct {
		Header struct {
			Revision string `json:"revision"`
		} `json:"header"`
	}
	// key "\x00" base64-encoded, a range over nothing: the header still carries the revision.
	if err := c.etcdPost(ctx, "/v3/kv/range", `{"key":"AA==","limit":1}`, &rng); err != nil {
		return 0, err
	}
	rev, err := strconv.ParseInt(rng.Header.Revision, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("cluster %q: etcd revision %q: %w", c.Name, rng.Header.Revision, err)
	}
	if err := c.etcdPost(ctx, "/v3/kv/compaction", fmt.Sprintf(`{"revision":"%d","physical":true}`, rev), nil); err != nil {
		return 0, err
	}
	return rev, nil
}

func (c *Cluster) etcdPost(ctx context.Context, path, body string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.EtcdURL()+path, bytes.NewBufferString(body))
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("cluster %q: etcd %s: %w", c.Name, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("cluster %q: etcd %s: %d %s", c.Name, path, resp.StatusCode, bytes.TrimSpace(b))
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// poll calls cond every 100 ms until it returns true or an error, ctx ends, or timeout passes.
func poll(ctx context.Context, timeout time.Duration, cond func() (bool, error)) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) { return cond() })
}

// ProcessState is "running (pid N)" or "stopped" for "apiserver", "etcd" or "controller-manager".
func (c *Cluster) ProcessState(which string) string {
	p := map[string]*proc{"apiserver": c.APIServer, "etcd": c.Etcd, "controller-manager": c.CM}[which]
	if p.alive() {
		return fmt.Sprintf("running(pid %d)", p.PID)
	}
	return "stopped"
}
