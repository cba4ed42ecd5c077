package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/sources"
	"github.com/multicache/multicache/test/fleet"
	"github.com/multicache/multicache/test/harness"
)

const secretsNS = "multicache-clusters"

// secretKubeconfig is a self-contained kubeconfig of c: its CA embedded and a bearer token.
func secretKubeconfig(t *testing.T, c *fleet.Cluster, token string) []byte {
	t.Helper()
	ca, err := os.ReadFile(c.Config().TLSClientConfig.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: c.URL(), CertificateAuthorityData: ca}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts["ctx"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = "ctx"
	b, err := clientcmd.Write(*kc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// clientCert writes a client CA and a certificate for user (CommonName) signed by it, and
// returns the CA's path and the certificate.
func clientCert(t *testing.T, dir, user string) (string, tls.Certificate) {
	t.Helper()
	ca := newTestCA(t, "multicache-e2e-client-ca")
	der, key := ca.issue(t, &x509.Certificate{Subject: pkix.Name{CommonName: user},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	caPath := filepath.Join(dir, "client-ca.pem")
	if err := os.WriteFile(caPath, ca.pem, 0o600); err != nil {
		t.Fatal(err)
	}
	return caPath, tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// identity is a caller and what it may read.
type identity struct {
	name     string
	token    string           // bearer token, or
	cert     *tls.Certificate // a client certificate
	clusters []string         // the clusters it may read, sorted
	secrets  []string         // the clusters whose Secrets it may read
}

func (id identity) may(c string) bool        { return slices.Contains(id.clusters, c) }
func (id identity) maySecrets(c string) bool { return slices.Contains(id.secrets, c) }

// mgmtEnv is the daemon under test and the clients that reach it.
type mgmtEnv struct {
	t    *testing.T
	ctx  context.Context
	url  string
	pool *x509.CertPool
	f    *fleet.Fleet
}

// get fetches path as id; it returns the code, the body and the Warning headers.
func (e *mgmtEnv) get(id identity, path string) (int, []byte, []string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer cancel()
	return e.getCtx(ctx, id, path)
}

func (e *mgmtEnv) client(id identity) *http.Client {
	tc := &tls.Config{RootCAs: e.pool}
	if id.cert != nil {
		tc.Certificates = []tls.Certificate{*id.cert}
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
}

func (e *mgmtEnv) getCtx(ctx context.Context, id identity, path string) (int, []byte, []string) {
	e.t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.url+path, nil)
	if id.token != "" {
		req.Header.Set("Authorization", "Bearer "+id.token)
	}
	resp, err := e.client(id).Do(req)
	if err != nil {
		e.t.Fatalf("%s: GET %s: %v", id.name, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body) // a watch ends with the context: what arrived is kept
	return resp.StatusCode, b, resp.Header.Values("Warning")
}

// TestManagementCluster runs the daemon against a management cluster (fleet-1): its members
// come from Secrets there, and callers are that cluster's identities, each reading only the
// clusters RBAC grants it, over every endpoint.
func TestManagementCluster(t *testing.T) {
	env := harness.Start(t, harness.Options{Clusters: 3})
	ctx, f := env.Ctx, env.Fleet
	names := f.Names()
	mgmtName, m2, m3 := names[0], names[1], names[2]
	mgmt, err := f.Clientset(mgmtName)
	if err != nil {
		t.Fatal(err)
	}
	c2, _ := f.Cluster(m2)
	c3, _ := f.Cluster(m3)
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}

	// Members: fleet-2 by our label, fleet-3 as Cluster API writes it (with another of its
	// Secrets beside, which is no cluster), and a broken one.
	_, err = mgmt.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: secretsNS}}, metav1.CreateOptions{})
	must("namespace", err)
	secrets := mgmt.CoreV1().Secrets(secretsNS)
	ownSecret := func(name, cluster string, kubeconfig []byte) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{sources.ClusterLabel: cluster}},
			Data: map[string][]byte{sources.ClusterKubeconfigKey: kubeconfig}}
	}
	capiSecret := func(name, cluster, key string, data []byte) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{sources.CAPIClusterLabel: cluster}},
			Type: sources.CAPISecretType, Data: map[string][]byte{key: data}}
	}
	_, err = secrets.Create(ctx, ownSecret("member-2", m2, secretKubeconfig(t, c2, c2.Token)), metav1.CreateOptions{})
	must("secret member-2", err)
	_, err = secrets.Create(ctx, capiSecret(m3+"-kubeconfig", m3, sources.CAPIKubeconfigKey, secretKubeconfig(t, c3, c3.Token)), metav1.CreateOptions{})
	must("capi secret", err)
	_, err = secrets.Create(ctx, capiSecret(m3+"-ca", m3, "tls.crt", []byte("not a kubeconfig")), metav1.CreateOptions{})
	must("capi ca secret", err)
	_, err = secrets.Create(ctx, ownSecret("broken", "broken", []byte("apiVersion: v1\nkind: Config\nclusters: [oops")), metav1.CreateOptions{})
	must("broken secret", err)

	// Identities: ServiceAccounts with bound tokens, and a user with a client certificate.
	rules := map[string][]rbacv1.PolicyRule{
		"alice": {{APIGroups: []string{"multicache.io"}, Resources: []string{"clusters"}, ResourceNames: []string{m2}, Verbs: []string{"get"}}},
		"bob":   {{APIGroups: []string{"multicache.io"}, Resources: []string{"clusters"}, Verbs: []string{"list"}}},
		"carol": {{APIGroups: []string{"multicache.io"}, Resources: []string{"clusters", "clusters/secrets"}, ResourceNames: []string{m3}, Verbs: []string{"get"}}},
	}
	for who, r := range rules {
		_, err := mgmt.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "e2e-" + who}, Rules: r}, metav1.CreateOptions{})
		must("role "+who, err)
		subject := rbacv1.Subject{Kind: "ServiceAccount", Name: who, Namespace: secretsNS}
		if who == "carol" {
			subject = rbacv1.Subject{Kind: "User", Name: "carol", APIGroup: "rbac.authorization.k8s.io"}
		}
		_, err = mgmt.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "e2e-" + who},
			RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "e2e-" + who}, Subjects: []rbacv1.Subject{subject}}, metav1.CreateOptions{})
		must("binding "+who, err)
	}
	token := func(sa string) string {
		_, err := mgmt.CoreV1().ServiceAccounts(secretsNS).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})
		must("service account "+sa, err)
		tr, err := mgmt.CoreV1().ServiceAccounts(secretsNS).CreateToken(ctx, sa, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		must("token "+sa, err)
		return tr.Status.Token
	}
	dir := t.TempDir()
	caPath, certPath, keyPath := selfSignedCA(t, dir)
	clientCA, carolCert := clientCert(t, dir, "carol")
	alice := identity{name: "alice", token: token("alice"), clusters: []string{m2}}
	bob := identity{name: "bob", token: token("bob"), clusters: []string{"broken", m2, m3}}
	eve := identity{name: "eve", token: token("eve")}
	carol := identity{name: "carol", cert: &carolCert, clusters: []string{m3}, secrets: []string{m3}}
	nobody := identity{name: "no credentials"}
	forged := identity{name: "a forged token", token: "eyJhbGciOiJSUzI1NiJ9.e30.c2lnbmF0dXJl"}

	// Data in the members.
	for _, c := range []string{m2, m3} {
		cs, _ := f.Clientset(c)
		_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "e2e-data"}}, metav1.CreateOptions{})
		must("data namespace", err)
		for i := range 3 {
			_, err := cs.CoreV1().ConfigMaps("e2e-data").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i)}, Data: map[string]string{"i": fmt.Sprint(i)}}, metav1.CreateOptions{})
			must("configmap", err)
			_, err = cs.CoreV1().Secrets("e2e-data").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("s-%d", i)}, StringData: map[string]string{"k": "v"}}, metav1.CreateOptions{})
			must("secret", err)
		}
	}

	cfg := filepath.Join(dir, "multicache.yaml")
	must("config", os.WriteFile(cfg, []byte(fmt.Sprintf(`server:
  tls: {certFile: %q, keyFile: %q, clientCAFile: %q}
readiness:
  deadClusterTimeout: 1s
`, certPath, keyPath, clientCA)), 0o600))
	pool := x509.NewCertPool()
	caPEM, _ := os.ReadFile(caPath)
	pool.AppendCertsFromPEM(caPEM)
	addr := harness.FreePort(t)
	d := harness.StartDaemonAt(t, "https", &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}, addr,
		"--config", cfg, "--management-kubeconfig", f.Kubeconfig(), "--management-context", mgmtName,
		"--cluster-secrets-namespace", secretsNS, "--auth", "delegated",
		"--resource", "configmaps", "--resource", "secrets", "--memory-limit", "3Gi")
	e := &mgmtEnv{t: t, ctx: ctx, url: d.URL, pool: pool, f: f}
	if log, _ := os.ReadFile(d.Log); !strings.Contains(string(log), `"goMemLimitBytes": 3221225472`) {
		t.Errorf("--memory-limit 3Gi: the log does not show the Go memory limit set to 3 GiB:\n%s", tail(string(log), 20))
	}

	// clusters is what /multicache/v1/clusters shows id.
	clusters := func(id identity) map[string]api.Cluster {
		t.Helper()
		code, b, _ := e.get(id, "/multicache/v1/clusters")
		if code != 200 {
			t.Fatalf("%s: clusters: %d %s", id.name, code, b)
		}
		var out api.Clusters
		must("clusters", json.Unmarshal(b, &out))
		m := map[string]api.Cluster{}
		for _, c := range out.Clusters {
			m[c.Name] = c
		}
		return m
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) { return cond(), nil }); err != nil {
			b, _ := os.ReadFile(d.Log)
			t.Fatalf("%s: not within a minute\n%s", what, tail(string(b), 40))
		}
	}
	allSynced := func(id identity, want ...string) func() bool {
		return func() bool {
			got := clusters(id)
			for _, n := range want {
				if got[n].State != "Synced" {
					return false
				}
			}
			return true
		}
	}
	waitFor("fleet-2 and fleet-3 synced", allSynced(bob, m2, m3))
	got := clusters(bob)
	if _, ok := got[mgmtName]; ok || len(got) != 3 {
		t.Errorf("clusters: %v, want broken, %s and %s (the management cluster is not a member unless a Secret says so)", keys(got), m2, m3)
	}
	if b := got["broken"]; b.State != "Failed" || !strings.Contains(b.Error, "Secret "+secretsNS+"/broken") || !strings.Contains(b.Error, `data key "kubeconfig"`) {
		t.Errorf("broken cluster: state %s error %q, want Failed naming the Secret and its key", b.State, b.Error)
	}

	ids := []identity{alice, bob, eve, carol}
	t.Run("unauthenticated", func(t *testing.T) {
		for _, id := range []identity{nobody, forged} {
			for _, p := range []string{"/multicache/v1/clusters", "/multicache/v1/resources/configmaps", "/api/v1/configmaps", "/metrics", "/readyz?verbose", "/apis"} {
				if code, b, _ := e.get(id, p); code != http.StatusUnauthorized {
					t.Errorf("%s: %s: %d %s, want 401", id.name, p, code, b)
				}
			}
		}
		if code, _, _ := e.get(nobody, "/readyz"); code != 200 {
			t.Errorf("terse /readyz without credentials: %d, want 200 (probes carry none)", code)
		}
	})
	t.Run("every endpoint, per identity", func(t *testing.T) {
		for _, id := range ids {
			checkIdentity(t, e, id, []string{"broken", m2, m3})
		}
	})
	t.Run("kubectl", func(t *testing.T) {
		out, err := exec.Command(filepath.Join(fleet.DefaultBinDir(), "kubectl"), "--server", d.URL, "--certificate-authority", caPath,
			"--token", alice.token, "get", "configmaps", "-n", "e2e-data", "-o", "name").CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl as alice: %v\n%s", err, out)
		}
		// Three names, each once per cluster alice reads: fleet-2 only. The left-out clusters
		// are named in a warning.
		if n := strings.Count(string(out), "configmap/cm-"); n != 3 || !strings.Contains(string(out), "clusters left out") {
			t.Errorf("kubectl get configmaps as alice: %d configmaps (want 3, fleet-2's), output:\n%s", n, out)
		}
	})

	t.Run("kubectl auth can-i and whoami agree with the reads", func(t *testing.T) {
		kubectl := func(id identity, server string, args ...string) (string, bool) {
			out, err := exec.Command(filepath.Join(fleet.DefaultBinDir(), "kubectl"), append([]string{"--server", server, "--certificate-authority", caPath,
				"--token", id.token}, args...)...).Output()
			return string(out), err == nil
		}
		for _, id := range []identity{alice, bob, eve} {
			for _, c := range []string{m2, m3} {
				out, yes := kubectl(id, d.URL+"/clusters/"+c, "auth", "can-i", "list", "configmaps", "-n", "e2e-data")
				code, _, _ := e.get(id, "/clusters/"+c+"/api/v1/namespaces/e2e-data/configmaps")
				if yes != id.may(c) || yes != (code == 200) {
					t.Errorf("%s in %s: can-i list configmaps %q (yes: %t); the list answers %d; may read: %t", id.name, c, out, yes, code, id.may(c))
				}
			}
			out, yes := kubectl(id, d.URL, "auth", "can-i", "list", "configmaps")
			if yes != (len(id.clusters) > 0) {
				t.Errorf("%s in the fleet view: can-i list configmaps %q, reads %v", id.name, out, id.clusters)
			}
			if out, yes := kubectl(id, d.URL, "auth", "can-i", "create", "configmaps"); yes {
				t.Errorf("%s: can-i create configmaps %q: writes are never allowed", id.name, out)
			}
		}
		if out, ok := kubectl(alice, d.URL, "auth", "whoami"); !ok || !strings.Contains(out, "system:serviceaccount:") || !strings.Contains(out, "alice") {
			t.Errorf("kubectl auth whoami as alice:\n%s", out)
		}
	})

	t.Run("clusters follow their Secrets", func(t *testing.T) {
		// A rotated Secret restarts its cluster, with writes running; the cache ends equal to
		// the API server.
		cs3, _ := f.Clientset(m3)
		stop := make(chan struct{})
		done := make(chan int)
		go func() {
			n := 0
			defer func() { done <- n }()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := cs3.CoreV1().ConfigMaps("e2e-data").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("w-%d", n)}}, metav1.CreateOptions{}); err == nil {
					n++
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
		time.Sleep(300 * time.Millisecond)
		sec, err := secrets.Get(ctx, m3+"-kubeconfig", metav1.GetOptions{})
		must("get capi secret", err)
		// The same identity with a token issued now: the kubeconfig changes, as in a rotation.
		cs3admin, _ := kubernetes.NewForConfig(c3.AdminConfig())
		tr, err := cs3admin.CoreV1().ServiceAccounts("multicache-system").CreateToken(ctx, "fleet-admin", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		must("new token for fleet-3", err)
		sec.Data[sources.CAPIKubeconfigKey] = secretKubeconfig(t, c3, tr.Status.Token)
		_, err = secrets.Update(ctx, sec, metav1.UpdateOptions{})
		must("rotate", err)
		waitFor("fleet-3 restarted after its Secret rotated", func() bool {
			c := clusters(bob)[m3]
			return c.State == "Synced" && restarts(t, e, bob, m3) > 0
		})
		time.Sleep(300 * time.Millisecond)
		close(stop)
		writes := <-done
		if writes == 0 {
			t.Fatal("no write went through the rotation")
		}
		waitFor("fleet-3's configmaps equal the API server after the rotation", func() bool {
			return sameConfigMaps(t, e, bob, m3)
		})

		// A deleted Secret removes its cluster; a fixed one recovers; a recreated one rejoins.
		must("delete member-2", secrets.Delete(ctx, "member-2", metav1.DeleteOptions{}))
		waitFor("fleet-2 gone after its Secret was deleted", func() bool { _, ok := clusters(bob)[m2]; return !ok })
		if code, _, _ := e.get(alice, "/clusters/"+m2+"/api/v1/namespaces/e2e-data/configmaps/cm-0"); code != http.StatusNotFound {
			t.Errorf("alice reading the removed fleet-2: %d, want 404", code)
		}
		fixed, err := secrets.Get(ctx, "broken", metav1.GetOptions{})
		must("get broken", err)
		fixed.Data[sources.ClusterKubeconfigKey] = secretKubeconfig(t, c2, c2.Token)
		_, err = secrets.Update(ctx, fixed, metav1.UpdateOptions{})
		must("fix broken", err)
		waitFor("the fixed Secret's cluster synced", allSynced(bob, "broken"))
		_, err = secrets.Create(ctx, ownSecret("member-2", m2, secretKubeconfig(t, c2, c2.Token)), metav1.CreateOptions{})
		must("recreate member-2", err)
		waitFor("fleet-2 back", allSynced(bob, m2))
		if !sameConfigMaps(t, e, alice, m2) {
			t.Error("fleet-2's configmaps as alice after it rejoined differ from the API server")
		}
	})
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// restarts reads the cluster's restart count from clusters.multicache.io.
func restarts(t *testing.T, e *mgmtEnv, id identity, cluster string) int64 {
	code, b, _ := e.get(id, "/apis/multicache.io/v1/clusters/"+cluster)
	if code != 200 {
		return -1
	}
	var obj struct {
		Status struct {
			Restarts int64 `json:"restarts"`
		} `json:"status"`
	}
	if json.Unmarshal(b, &obj) != nil {
		return -1
	}
	return obj.Status.Restarts
}

// sameConfigMaps compares the configmaps of e2e-data in cluster, as id reads them through the
// Kubernetes API, with the API server's own list.
func sameConfigMaps(t *testing.T, e *mgmtEnv, id identity, cluster string) bool {
	t.Helper()
	cs, err := e.f.Clientset(cluster)
	if err != nil {
		t.Fatal(err)
	}
	truth, err := cs.CoreV1().ConfigMaps("e2e-data").List(e.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, cm := range truth.Items {
		want[cm.Name] = string(cm.UID)
	}
	code, b, _ := e.get(id, "/clusters/"+cluster+"/api/v1/namespaces/e2e-data/configmaps")
	if code != 200 {
		return false
	}
	got := map[string]string{}
	for _, it := range kubeItems(t, b) {
		got[it.Metadata.Name] = it.Metadata.UID
	}
	return fmt.Sprint(got) == fmt.Sprint(want)
}

type kubeMeta struct {
	Name        string            `json:"name"`
	UID         string            `json:"uid"`
	Annotations map[string]string `json:"annotations"`
}

type kubeItem struct {
	Metadata kubeMeta          `json:"metadata"`
	Data     map[string]string `json:"data"`
}

func kubeItems(t *testing.T, b []byte) []kubeItem {
	t.Helper()
	var l struct {
		Items []kubeItem `json:"items"`
	}
	if err := json.Unmarshal(b, &l); err != nil {
		t.Fatalf("list %q: %v", b, err)
	}
	return l.Items
}

// checkIdentity checks what id gets from every endpoint that shows cluster data, against what
// RBAC grants it and what the API servers hold.
func checkIdentity(t *testing.T, e *mgmtEnv, id identity, fleetClusters []string) {
	t.Helper()
	members := []string{}
	for _, c := range fleetClusters {
		if c != "broken" {
			members = append(members, c)
		}
	}
	var allowed []string
	for _, c := range fleetClusters {
		if id.may(c) {
			allowed = append(allowed, c)
		}
	}
	// 1. The clusters endpoints.
	code, b, _ := e.get(id, "/multicache/v1/clusters")
	var cl api.Clusters
	_ = json.Unmarshal(b, &cl)
	var shown []string
	for _, c := range cl.Clusters {
		shown = append(shown, c.Name)
	}
	if code != 200 || strings.Join(shown, ",") != strings.Join(allowed, ",") {
		t.Errorf("%s: /multicache/v1/clusters: %d %v, want %v", id.name, code, shown, allowed)
	}
	code, b, _ = e.get(id, "/apis/multicache.io/v1/clusters")
	shown = nil
	if code == 200 {
		for _, it := range kubeItems(t, b) {
			shown = append(shown, it.Metadata.Name)
		}
	}
	if code != 200 || strings.Join(shown, ",") != strings.Join(allowed, ",") {
		t.Errorf("%s: clusters.multicache.io: %d %v, want %v", id.name, code, shown, allowed)
	}
	for _, c := range fleetClusters {
		code, _, _ := e.get(id, "/apis/multicache.io/v1/clusters/"+c)
		if want := map[bool]int{true: 200, false: 403}[id.may(c)]; code != want {
			t.Errorf("%s: get clusters.multicache.io %s: %d, want %d", id.name, c, code, want)
		}
	}

	// 2. Fleet-wide lists: the allowed clusters, equal to the API servers; the others named as
	// left out.
	for _, res := range []string{"configmaps", "secrets"} {
		may := id.may
		if res == "secrets" {
			may = id.maySecrets
		}
		want := map[string]bool{}
		for _, c := range members {
			if !may(c) {
				continue
			}
			cs, _ := e.f.Clientset(c)
			var names []string
			if res == "configmaps" {
				l, err := cs.CoreV1().ConfigMaps("e2e-data").List(e.ctx, metav1.ListOptions{})
				if err != nil {
					t.Fatal(err)
				}
				for _, o := range l.Items {
					names = append(names, o.Name)
				}
			} else {
				l, err := cs.CoreV1().Secrets("e2e-data").List(e.ctx, metav1.ListOptions{})
				if err != nil {
					t.Fatal(err)
				}
				for _, o := range l.Items {
					names = append(names, o.Name)
				}
			}
			for _, n := range names {
				want[c+"|"+n] = true
			}
		}
		code, b, _ := e.get(id, "/multicache/v1/resources/"+res+"?namespace=e2e-data")
		var l api.List
		_ = json.Unmarshal(b, &l)
		got := map[string]bool{}
		for _, it := range l.Items {
			li, err := decoded(it)
			if err != nil {
				t.Fatal(err)
			}
			got[it.Cluster+"|"+li.Object.Metadata.Name] = true
		}
		if code != 200 || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: native list of %s: %d, got %v, want %v", id.name, res, code, keys(got), keys(want))
		}
		var forbidden []string
		for _, c := range l.Clusters {
			if c.Forbidden {
				forbidden = append(forbidden, c.Name)
			}
		}
		var wantForbidden []string
		for _, c := range fleetClusters {
			if !may(c) {
				wantForbidden = append(wantForbidden, c)
			}
		}
		if strings.Join(forbidden, ",") != strings.Join(wantForbidden, ",") {
			t.Errorf("%s: native list of %s: clusters marked forbidden %v, want %v", id.name, res, forbidden, wantForbidden)
		}

		// A summary counts what the caller may read, per cluster, as the list does: the
		// same counts as the list's items, the same clusters left out; its total is the
		// list's.
		code, b, _ = e.get(id, "/multicache/v1/resources/"+res+"/summary?by=cluster&namespace=e2e-data")
		var sum api.Summary
		_ = json.Unmarshal(b, &sum)
		wantCounts, gotCounts := map[string]int{}, map[string]int{}
		for k := range want {
			c, _, _ := strings.Cut(k, "|")
			wantCounts[c]++
		}
		for _, g := range sum.Groups {
			gotCounts[show(g.Key["cluster"])] = g.Count
		}
		var sumForbidden []string
		for _, c := range sum.Clusters {
			if c.Forbidden {
				sumForbidden = append(sumForbidden, c.Name)
			}
		}
		if code != 200 || fmt.Sprint(gotCounts) != fmt.Sprint(wantCounts) || sum.Total != len(want) || l.Total != int64(len(want)) ||
			strings.Join(sumForbidden, ",") != strings.Join(wantForbidden, ",") {
			t.Errorf("%s: summary of %s by cluster: %d %v (total %d, list total %d, forbidden %v), want %v (total %d, forbidden %v)",
				id.name, res, code, gotCounts, sum.Total, l.Total, sumForbidden, wantCounts, len(want), wantForbidden)
		}

		code, b, warnings := e.get(id, "/api/v1/namespaces/e2e-data/"+res)
		got = map[string]bool{}
		if code == 200 {
			for _, it := range kubeItems(t, b) {
				got[it.Metadata.Annotations[api.ClusterAnnotation]+"|"+it.Metadata.Name] = true
				if res == "secrets" && it.Data != nil {
					t.Errorf("%s: a Secret's data was served", id.name)
				}
			}
		}
		if code != 200 || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: Kubernetes list of %s: %d, got %v, want %v", id.name, res, code, keys(got), keys(want))
		}
		warned := strings.Join(warnings, "\n")
		for _, c := range wantForbidden {
			if !strings.Contains(warned, c) {
				t.Errorf("%s: Kubernetes list of %s: no warning names left-out cluster %s (warnings %q)", id.name, res, c, warned)
			}
		}

		// 3. One cluster, by filter and by path; one object.
		for _, c := range members {
			wantCode := map[bool]int{true: 200, false: 403}[may(c)]
			if code, b, _ := e.get(id, "/multicache/v1/resources/"+res+"?cluster="+c); code != wantCode {
				t.Errorf("%s: %s with cluster=%s: %d %s, want %d", id.name, res, c, code, b, wantCode)
			}
			if code, b, _ := e.get(id, "/clusters/"+c+"/api/v1/namespaces/e2e-data/"+res); code != wantCode {
				t.Errorf("%s: %s at /clusters/%s: %d %s, want %d", id.name, res, c, code, b, wantCode)
			}
			obj := map[string]string{"configmaps": "cm-0", "secrets": "s-0"}[res]
			if code, b, _ := e.get(id, "/multicache/v1/resources/"+res+"/"+c+"/e2e-data/"+obj); code != wantCode {
				t.Errorf("%s: get %s %s/%s: %d %s, want %d", id.name, res, c, obj, code, b, wantCode)
			}
			if code, b, _ := e.get(id, "/clusters/"+c+"/api/v1/namespaces/e2e-data/"+res+"/"+obj); code != wantCode {
				t.Errorf("%s: Kubernetes get %s %s/%s: %d %s, want %d", id.name, res, c, obj, code, b, wantCode)
			}
		}
		// By name across the fleet: a Table row per readable cluster, none from the others.
		code, b, _ = e.get(id, "/api/v1/namespaces/e2e-data/"+res+"/"+map[string]string{"configmaps": "cm-1", "secrets": "s-1"}[res])
		wantRows := 0
		for _, c := range members {
			if may(c) {
				wantRows++
			}
		}
		switch {
		case wantRows == 0 && code != 404, wantRows == 1 && code != 200, wantRows > 1 && code != 409:
			t.Errorf("%s: Kubernetes get of %s by name across the fleet: %d %s (readable in %d clusters)", id.name, res, code, b, wantRows)
		}

		// 4. Watches, both APIs: the initial events come from the allowed clusters only.
		for _, p := range []string{"/multicache/v1/resources/" + res + "?namespace=e2e-data&watch=true", "/api/v1/namespaces/e2e-data/" + res + "?watch=true"} {
			ctx, cancel := context.WithTimeout(e.ctx, time.Second)
			code, b, _ := e.getCtx(ctx, id, p)
			cancel()
			if code != 200 {
				t.Errorf("%s: watch %s: %d %s", id.name, p, code, b)
				continue
			}
			seen := map[string]bool{}
			sc := bufio.NewScanner(strings.NewReader(string(b)))
			sc.Buffer(nil, 1<<20)
			for sc.Scan() {
				var ev struct {
					Type    string          `json:"type"`
					Cluster string          `json:"cluster"`
					Object  json.RawMessage `json:"object"`
				}
				if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.Type != "ADDED" {
					continue
				}
				var o kubeItem
				_ = json.Unmarshal(ev.Object, &o)
				c := ev.Cluster
				if c == "" {
					c = o.Metadata.Annotations[api.ClusterAnnotation]
				}
				seen[c+"|"+o.Metadata.Name] = true
			}
			if fmt.Sprint(seen) != fmt.Sprint(want) {
				t.Errorf("%s: watch %s: initial events %v, want %v", id.name, p, keys(seen), keys(want))
			}
		}
	}

	// 5. Discovery of a cluster's view is as readable as the cluster.
	for _, c := range members {
		wantCode := map[bool]int{true: 200, false: 403}[id.may(c)]
		if code, _, _ := e.get(id, "/clusters/"+c+"/api/v1"); code != wantCode {
			t.Errorf("%s: discovery at /clusters/%s: %d, want %d", id.name, c, code, wantCode)
		}
	}

	// 6. Metrics: series of the allowed clusters only; the review cache's hit ratio.
	code, b, _ = e.get(id, "/metrics")
	if code != 200 {
		t.Errorf("%s: /metrics: %d", id.name, code)
		return
	}
	for _, c := range fleetClusters {
		has := strings.Contains(string(b), `cluster="`+c+`"`)
		if has != id.may(c) {
			t.Errorf("%s: /metrics shows cluster %s: %v, want %v", id.name, c, has, id.may(c))
		}
	}
	if !strings.Contains(string(b), `multicache_auth_review_cache_hit_ratio{review="access"}`) {
		t.Errorf("%s: /metrics lacks the review cache hit ratio", id.name)
	}
}
