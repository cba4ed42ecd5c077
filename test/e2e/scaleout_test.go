package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/sources"
	"github.com/multicache/multicache/test/fleet"
	"github.com/multicache/multicache/test/harness"
)

const (
	shardNS       = "multicache-system"
	scaleNS       = "scale"
	shardLease    = 3 * time.Second
	scaleToken    = "scale-out-token"
	scaleResource = "configmaps"
)

// replica is one `multicache serve --sharding` of the scale-out test.
type replica struct {
	id string
	d  *harness.Daemon
}

// scaleEnv is the management cluster, the members and the replicas.
type scaleEnv struct {
	t       *testing.T
	ctx     context.Context
	f       *fleet.Fleet
	mgmt    kubernetes.Interface
	mgmtCtx string
	members []string
	token   string // path of the token file
	dir     string
	// stable tells the keys (cluster|ns/name) of objects no writer deletes: a watcher told
	// that one is gone was told a delete nobody made. nil: every object may be deleted.
	stable func(key string) bool
	// tls makes the replicas serve https and trust each other through peer certificates
	// (sharding.peerCertFile), as a sharded replica with auth must; client trusts their CA.
	tls    *peerPKI
	client *http.Client
	// source are the replicas' cluster source flags. Default: the cluster Secrets in secretsNS.
	source []string
	// servers are the API servers the members are seen through (the fleet's clusters but the
	// management one), and server says which one a member is: itself, or with aliases the one
	// its Secret names. Writes and ground truth go to each server once.
	servers []string
	server  map[string]string
	// page is the small page size the answers are read by as well as whole.
	page int
	// args are more flags for every replica.
	args []string
	// bin is the daemon binary replicas start from: "" for this tree's (harness.Binary), or
	// another release's (harness.BinaryAt).
	bin string
}

// httpClient is how the test reaches the replicas.
func (e *scaleEnv) httpClient() *http.Client { return e.client }

// restConfig is how client-go reaches host (a replica's URL and path) with the test's token.
func (e *scaleEnv) restConfig(host string) *rest.Config {
	return &rest.Config{Host: host, BearerToken: scaleToken, TLSClientConfig: rest.TLSClientConfig{CAData: e.tls.ca.pem}}
}

func (e *scaleEnv) start(id string, extra ...string) replica {
	e.t.Helper()
	return e.startAt(id, harness.FreePort(e.t), extra...)
}

// startAt starts replica id listening on addr (a restarted replica keeps its address, as a
// Pod keeps its Service).
func (e *scaleEnv) startAt(id, addr string, extra ...string) replica {
	e.t.Helper()
	scheme, client := "https", e.httpClient()
	extra = append(append(extra, e.args...), e.tls.args(id)...)
	source := e.source
	if source == nil {
		source = []string{"--cluster-secrets-namespace", secretsNS}
	}
	args := append([]string{"--management-kubeconfig", e.f.Kubeconfig(), "--management-context", e.mgmtCtx}, source...)
	args = append(append(args, "--token-file", e.token, "--resource", scaleResource,
		"--sharding", "--sharding-namespace", shardNS, "--advertise-url", scheme+"://"+addr, "--replica-id", id,
		"--lease-duration", shardLease.String()), extra...)
	bin := e.bin
	if bin == "" {
		bin = harness.Binary(e.t)
	}
	d := harness.StartBinaryAt(e.t, bin, scheme, client, addr, args...)
	d.Token = scaleToken
	// On failure (or with MULTICACHE_E2E_LOGS set), the replica's last log lines (its warnings
	// and state changes) go into the test's output: a move that goes wrong is only
	// diagnosable from them.
	e.t.Cleanup(func() {
		if !e.t.Failed() && os.Getenv("MULTICACHE_E2E_LOGS") == "" {
			return
		}
		if b, err := os.ReadFile(d.Log); err == nil {
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			e.t.Logf("replica %s, last %d log lines:\n%s", id, min(200, len(lines)), strings.Join(lines[max(0, len(lines)-200):], "\n"))
		}
	})
	return replica{id: id, d: d}
}

// fences reads the fence Leases: cluster → holder.
func (e *scaleEnv) fences(ctx context.Context) (map[string]string, map[string]time.Time, error) {
	ls, err := e.mgmt.CoordinationV1().Leases(shardNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	holders, renewed := map[string]string{}, map[string]time.Time{}
	for _, l := range ls.Items {
		holder := ""
		if l.Spec.HolderIdentity != nil {
			holder = *l.Spec.HolderIdentity
		}
		switch l.Labels["multicache.io/lease"] {
		case "fence":
			holders[l.Annotations["multicache.io/cluster"]] = holder
		case "peer":
			if l.Spec.RenewTime != nil {
				renewed[holder] = l.Spec.RenewTime.Time
			}
		}
	}
	return holders, renewed, nil
}

// unowned counts the members whose fence has no live holder: none, or one whose peer Lease was
// not renewed within a lease duration (the API server's clock, which every process here shares).
func unowned(members []string, holders map[string]string, renewed map[string]time.Time, dead map[string]bool) []string {
	var out []string
	for _, c := range members {
		h := holders[c]
		r, ok := renewed[h]
		if h == "" || dead[h] || !ok || time.Since(r) > shardLease+time.Second {
			out = append(out, c)
		}
	}
	return out
}

// newScaleEnv starts a local fleet of n clusters: the first is the management cluster (the
// replicas' Leases, the members' Secrets), the others are members, each with 30 ConfigMaps
// cm-0 … cm-29 in namespace scale.
func newScaleEnv(t *testing.T, n int) (*scaleEnv, *harness.Env) { return newAliasedScaleEnv(t, n, 0) }

// newAliasedScaleEnv is newScaleEnv whose n-1 member API servers are each seen through aliases
// clusters of their own (a Secret each, naming the same server, as S2 sees its servers through
// kubeconfig contexts): (n-1) × aliases members, each holding its server's objects. With 0,
// each server is one member under its own name.
func newAliasedScaleEnv(t *testing.T, n, aliases int) (*scaleEnv, *harness.Env) {
	env := harness.Start(t, harness.Options{Clusters: n, Timeout: 20*time.Minute + time.Duration(aliases*(n-1))*3*time.Second, AuditReads: true})
	ctx, f := env.Ctx, env.Fleet
	names := f.Names()
	mgmt, err := f.Clientset(names[0])
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	e := &scaleEnv{t: t, ctx: ctx, f: f, mgmt: mgmt, mgmtCtx: names[0], servers: names[1:], server: map[string]string{},
		token: filepath.Join(dir, "tokens"), dir: dir, tls: newPeerPKI(t), page: 7}
	for _, s := range e.servers {
		if aliases == 0 {
			e.members, e.server[s] = append(e.members, s), s
			continue
		}
		for i := range aliases {
			m := fmt.Sprintf("%s-a%03d", s, i)
			e.members, e.server[m] = append(e.members, m), s
		}
	}
	e.client = e.tls.clientWith(nil)
	must := func(what string, err error) {
		t.Helper()
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("%s: %v", what, err)
		}
	}
	must("token file", os.WriteFile(e.token, []byte(scaleToken+"\n"), 0o600))
	for _, ns := range []string{secretsNS, shardNS} {
		_, err := mgmt.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		must("namespace "+ns, err)
	}
	for _, m := range e.members {
		c, _ := f.Cluster(e.server[m])
		_, err := mgmt.CoreV1().Secrets(secretsNS).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "member-" + m, Labels: map[string]string{sources.ClusterLabel: m}},
			Data: map[string][]byte{sources.ClusterKubeconfigKey: secretKubeconfig(t, c, c.Token)}}, metav1.CreateOptions{})
		must("secret "+m, err)
	}
	for _, s := range e.servers {
		cs, _ := f.Clientset(s)
		_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: scaleNS}}, metav1.CreateOptions{})
		must("namespace "+scaleNS, err)
		for i := range 30 {
			_, err := cs.CoreV1().ConfigMaps(scaleNS).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i)}, Data: map[string]string{"n": "0"}}, metav1.CreateOptions{})
			must("configmap", err)
		}
	}
	return e, env
}

// settled waits until every member is owned by a live replica and every replica of rs reports
// every member Synced at its owner, and returns the owners.
func (e *scaleEnv) settled(what string, rs []replica, dead map[string]bool, within time.Duration) map[string]string {
	e.t.Helper()
	var holders map[string]string
	harness.WaitFor(e.t, what, within, func() bool {
		h, renewed, err := e.fences(e.ctx)
		if err != nil || len(unowned(e.members, h, renewed, dead)) > 0 {
			return false
		}
		holders = h
		for _, r := range rs {
			var cl api.Clusters
			if e.get(r, api.ClustersPath, &cl) != nil || len(cl.Clusters) != len(e.members) {
				return false
			}
			for _, c := range cl.Clusters {
				if c.State != "Synced" || c.Owner != h[c.Name] {
					return false
				}
			}
		}
		return true
	})
	return holders
}

// truth lists the members' ConfigMaps from their API servers, each server once:
// cluster|ns/name → resourceVersion.
func (e *scaleEnv) truth() map[string]string {
	e.t.Helper()
	of := map[string][]corev1.ConfigMap{}
	for _, s := range e.servers {
		cs, err := e.f.Clientset(s)
		if err != nil {
			e.t.Fatal(err)
		}
		l, err := cs.CoreV1().ConfigMaps("").List(e.ctx, metav1.ListOptions{})
		if err != nil {
			e.t.Fatalf("ground truth: %s: %v", s, err)
		}
		of[s] = l.Items
	}
	out := map[string]string{}
	for _, m := range e.members {
		for _, cm := range of[e.server[m]] {
			out[m+"|"+cm.Namespace+"/"+cm.Name] = cm.ResourceVersion
		}
	}
	return out
}

// get fetches path from r, decoding a 200 into out.
func (e *scaleEnv) get(r replica, path string, out any) error {
	_, err := e.getWarned(r, path, out)
	return err
}

// getWarned is get, and returns the answer's Warning headers.
func (e *scaleEnv) getWarned(r replica, path string, out any) ([]string, error) {
	ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, r.d.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+scaleToken)
	resp, err := e.httpClient().Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s from %s: %d %s", path, r.id, resp.StatusCode, b)
	}
	return resp.Header.Values("Warning"), json.Unmarshal(b, out)
}

// scaleList is a Kubernetes API list as the tests read it.
type scaleList struct {
	Metadata metav1.ListMeta    `json:"metadata"`
	Items    []corev1.ConfigMap `json:"items"`
}

func kubeKey(cm *corev1.ConfigMap) (string, string) {
	return cm.Annotations[api.ClusterAnnotation] + "|" + cm.Namespace + "/" + cm.Name, cm.Annotations[api.ResourceVersionAnnotation]
}

// answers reads r's native list (whole and by pages of e.page) when withNative, and its
// Kubernetes API list (whole and by pages of e.page): each as cluster|ns/name →
// resourceVersion, and what went wrong.
func (e *scaleEnv) answers(r replica, withNative bool) (map[string]map[string]string, error) {
	out := map[string]map[string]string{}
	nativeList := func(limit int) (map[string]string, error) {
		m := map[string]string{}
		cont := ""
		for {
			q := url.Values{"limit": {fmt.Sprint(limit)}}
			if cont != "" {
				q.Set("continue", cont)
			}
			var l api.List
			if err := e.get(r, api.ResourcesPath+"/"+scaleResource+"?"+q.Encode(), &l); err != nil {
				return nil, err
			}
			for _, f := range l.Clusters {
				if !f.Synced {
					return nil, fmt.Errorf("native list from %s: cluster %s not synced: %s", r.id, f.Name, f.Error)
				}
			}
			for _, it := range l.Items {
				var om api.ObjectMeta
				_ = json.Unmarshal(it.Object, &om)
				k := it.Cluster + "|" + om.Metadata.Namespace + "/" + om.Metadata.Name
				if _, dup := m[k]; dup {
					return nil, fmt.Errorf("native list from %s: %s twice", r.id, k)
				}
				m[k] = om.Metadata.ResourceVersion
			}
			if cont = l.Continue; cont == "" {
				return m, nil
			}
		}
	}
	kube := func(limit int) (map[string]string, error) {
		m := map[string]string{}
		cont := ""
		for {
			q := url.Values{}
			if limit > 0 {
				q.Set("limit", fmt.Sprint(limit))
			}
			if cont != "" {
				q.Set("continue", cont)
			}
			var l scaleList
			if err := e.get(r, "/api/v1/configmaps?"+q.Encode(), &l); err != nil {
				return nil, err
			}
			for i := range l.Items {
				k, rv := kubeKey(&l.Items[i])
				if _, dup := m[k]; dup {
					return nil, fmt.Errorf("kube list from %s: %s twice", r.id, k)
				}
				m[k] = rv
			}
			if cont = l.Metadata.Continue; cont == "" {
				return m, nil
			}
		}
	}
	var err error
	if withNative {
		if out["native"], err = nativeList(1000); err != nil {
			return nil, err
		}
		if out["native paged"], err = nativeList(e.page); err != nil {
			return nil, err
		}
	}
	if out["kube"], err = kube(0); err != nil {
		return nil, err
	}
	if out["kube paged"], err = kube(e.page); err != nil {
		return nil, err
	}
	return out, nil
}

// equalTruth waits until every answer of every replica equals the API servers' lists.
func (e *scaleEnv) equalTruth(what string, rs []replica, within time.Duration) {
	e.t.Helper()
	e.equalTruthOf(what, rs, within, true)
}

// equalTruthOf is equalTruth, the native API's lists left out unless native.
func (e *scaleEnv) equalTruthOf(what string, rs []replica, within time.Duration, native bool) {
	e.t.Helper()
	deadline := time.Now().Add(within)
	for {
		truth := e.truth()
		var problems []string
		for _, r := range rs {
			got, err := e.answers(r, native)
			if err != nil {
				problems = append(problems, err.Error())
				continue
			}
			for kind, m := range got {
				if d := harness.Diff(truth, m); len(d) > 0 {
					problems = append(problems, fmt.Sprintf("%s, %s answer: %d differences, e.g. %v", r.id, kind, len(d), d[:min(3, len(d))]))
				}
			}
		}
		if len(problems) == 0 {
			lists := "Kubernetes and paged Kubernetes"
			if native {
				lists = "native, paged, " + lists
			}
			e.t.Logf("%s: every replica's %s lists equal the API servers' (%d ConfigMaps in %d clusters)", what, lists, len(truth), len(e.members))
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s: answers differ from the API servers after %s:\n%s", what, within, strings.Join(problems, "\n"))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// follower is a client-go Reflector on a replica's Kubernetes API: it lists, watches, and
// lists again on 410, as every informer does. Its store is keyed by cluster too.
type follower struct {
	r      replica
	store  cache.Store
	cancel context.CancelFunc
	done   chan struct{}
	// invented counts the objects it was told are gone (a DELETED event, or missing from a
	// relist) though they were never deleted (scaleEnv.stable).
	invented atomic.Int64
}

// countingStore is a Reflector's store that counts removals of stable objects: a DELETED
// event, or an object a relist (Replace) no longer has, which an informer hands its handlers
// as a delete.
type countingStore struct {
	cache.Store
	keyOf    cache.KeyFunc
	stable   func(key string) bool // nil: nothing is stable
	invented *atomic.Int64
}

func (s *countingStore) Delete(obj any) error {
	if k, err := s.keyOf(obj); err == nil && s.stable != nil && s.stable(k) {
		s.invented.Add(1)
	}
	return s.Store.Delete(obj)
}

func (s *countingStore) Replace(list []any, rv string) error {
	if s.stable != nil {
		kept := map[string]bool{}
		for _, obj := range list {
			if k, err := s.keyOf(obj); err == nil {
				kept[k] = true
			}
		}
		for _, k := range s.Store.ListKeys() {
			if !kept[k] && s.stable(k) {
				s.invented.Add(1)
			}
		}
	}
	return s.Store.Replace(list, rv)
}

func (e *scaleEnv) follow(r replica) *follower {
	cs, err := kubernetes.NewForConfig(e.restConfig(r.d.URL))
	if err != nil {
		e.t.Fatal(err)
	}
	keyOf := func(obj any) (string, error) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			return d.Key, nil
		}
		cm, ok := obj.(*corev1.ConfigMap)
		if !ok {
			return "", fmt.Errorf("not a ConfigMap: %T", obj)
		}
		k, _ := kubeKey(cm)
		return k, nil
	}
	fo0 := &follower{r: r}
	store := &countingStore{Store: cache.NewStore(keyOf), keyOf: keyOf, stable: e.stable, invented: &fo0.invented}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return cs.CoreV1().ConfigMaps("").List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return cs.CoreV1().ConfigMaps("").Watch(ctx, o)
		},
	}
	refl := cache.NewReflectorWithOptions(listThenWatch{lw}, &corev1.ConfigMap{}, store, cache.ReflectorOptions{Name: "follower of " + r.id})
	ctx, cancel := context.WithCancel(e.ctx)
	fo := fo0
	fo.store, fo.cancel, fo.done = store, cancel, make(chan struct{})
	go func() { defer close(fo.done); refl.RunWithContext(ctx) }()
	e.t.Cleanup(fo.stop)
	return fo
}

// listThenWatch opts out of client-go's watch-list: its reflector collects the initial events
// in a store keyed by namespace/name, which folds the fleet view's same-named objects of
// different clusters into one. A list keeps them all, in a store keyed by cluster too.
type listThenWatch struct{ *cache.ListWatch }

func (listThenWatch) IsWatchListSemanticsUnSupported() bool { return true }

func (fo *follower) stop() { fo.cancel(); <-fo.done }

func (fo *follower) state() map[string]string {
	out := map[string]string{}
	for _, obj := range fo.store.List() {
		k, rv := kubeKey(obj.(*corev1.ConfigMap))
		out[k] = rv
	}
	return out
}

// followersEqualTruth waits until every follower's store equals the API servers' lists.
func (e *scaleEnv) followersEqualTruth(what string, fos []*follower, within time.Duration) {
	e.t.Helper()
	deadline := time.Now().Add(within)
	for {
		truth := e.truth()
		var problems []string
		for _, fo := range fos {
			if d := harness.Diff(truth, fo.state()); len(d) > 0 {
				problems = append(problems, fmt.Sprintf("follower of %s: %d differences, e.g. %v", fo.r.id, len(d), d[:min(3, len(d))]))
			}
		}
		if len(problems) == 0 {
			e.t.Logf("%s: the reflectors on %d replicas equal the API servers", what, len(fos))
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s: reflectors differ from the API servers after %s:\n%s", what, within, strings.Join(problems, "\n"))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// writer creates, updates and deletes ConfigMaps in every member until stopped.
type writer struct {
	stop   context.CancelFunc
	wg     sync.WaitGroup
	writes atomic.Int64
	errs   atomic.Int64
	// held is held by each write, and by hold: no write runs between hold and release.
	held sync.RWMutex
}

// hold waits for the writes under way and holds the next until release: a comparison of the
// replicas' answers with the API servers' lists then has a fixed truth to reach.
func (w *writer) hold()    { w.held.Lock() }
func (w *writer) release() { w.held.Unlock() }

// writeOps writes perClusterPerSecond times a second in every member's API server (once for
// all its aliases); with keepStable, the seeded ConfigMaps cm-0 … cm-29 are only updated, and
// creates and deletes go to churn-0 … churn-29 (see scaleEnv.stable).
func (e *scaleEnv) writeOps(perClusterPerSecond int, keepStable bool) *writer {
	ctx, stop := context.WithCancel(e.ctx)
	w := &writer{stop: stop}
	for i, c := range e.servers {
		cs, err := e.f.Clientset(c)
		if err != nil {
			e.t.Fatal(err)
		}
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			tick := time.NewTicker(time.Second / time.Duration(perClusterPerSecond))
			defer tick.Stop()
			for n := 0; ; n++ {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				name := fmt.Sprintf("cm-%d", rng.IntN(60))
				op := rng.IntN(3)
				if keepStable {
					if name = fmt.Sprintf("cm-%d", rng.IntN(30)); rng.IntN(2) == 0 {
						name = fmt.Sprintf("churn-%d", rng.IntN(30))
					} else {
						op = 1 // a stable object: updated only
					}
				}
				cms := cs.CoreV1().ConfigMaps(scaleNS)
				var err error
				w.held.RLock()
				switch op {
				case 0:
					_, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"n": fmt.Sprint(n)}}, metav1.CreateOptions{})
				case 1:
					var cm *corev1.ConfigMap
					if cm, err = cms.Get(ctx, name, metav1.GetOptions{}); err == nil {
						cm.Data = map[string]string{"n": fmt.Sprint(n)}
						_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
					}
				default:
					err = cms.Delete(ctx, name, metav1.DeleteOptions{})
				}
				w.held.RUnlock()
				switch {
				case err == nil:
					w.writes.Add(1)
				case apierrors.IsNotFound(err), apierrors.IsAlreadyExists(err), apierrors.IsConflict(err), ctx.Err() != nil:
				default:
					w.errs.Add(1)
				}
			}
		}()
	}
	return w
}

func (w *writer) end() { w.stop(); w.wg.Wait() }

// rawWatch is a watch on a replica's Kubernetes API, read line by line.
type rawWatch struct {
	r      replica
	mu     sync.Mutex
	seen   map[string]bool // cluster|ns/name of the objects events carried
	ended  string          // how it ended: "" while open
	cancel context.CancelFunc
}

func (e *scaleEnv) rawWatch(r replica) *rawWatch {
	e.t.Helper()
	var l scaleList
	if err := e.get(r, "/api/v1/configmaps?limit=1", &l); err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	e.t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, r.d.URL+"/api/v1/configmaps?watch=1&resourceVersion="+url.QueryEscape(l.Metadata.ResourceVersion), nil)
	req.Header.Set("Authorization", "Bearer "+scaleToken)
	resp, err := e.httpClient().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		e.t.Fatalf("watch on %s: %d %s", r.id, resp.StatusCode, b)
	}
	w := &rawWatch{r: r, seen: map[string]bool{}, cancel: cancel}
	go func() {
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			var ev struct {
				Type   string          `json:"type"`
				Object json.RawMessage `json:"object"`
			}
			if json.Unmarshal(sc.Bytes(), &ev) != nil {
				continue
			}
			w.mu.Lock()
			if ev.Type == "ERROR" {
				var st metav1.Status
				_ = json.Unmarshal(ev.Object, &st)
				w.ended = fmt.Sprintf("ERROR %d: %s", st.Code, st.Message)
				w.mu.Unlock()
				return
			}
			var cm corev1.ConfigMap
			if json.Unmarshal(ev.Object, &cm) == nil {
				k, _ := kubeKey(&cm)
				w.seen[k] = true
			}
			w.mu.Unlock()
		}
		w.mu.Lock()
		if w.ended == "" {
			w.ended = fmt.Sprintf("stream closed (%v)", sc.Err())
		}
		w.mu.Unlock()
	}()
	return w
}

// TestScaleOut runs three replicas of the daemon sharing six member clusters through Leases
// in a management cluster, under writes: every cluster has exactly one owner; every replica's
// lists, pages and watches equal the API servers; the replica owning the most clusters is
// killed (SIGKILL) and its clusters are owned again within two lease durations; a fourth
// replica joins and takes some clusters without leaving any unowned or any watch silent.
func TestScaleOut(t *testing.T) {
	e, env := newScaleEnv(t, 7)
	ctx, f, names := env.Ctx, env.Fleet, env.Fleet.Names()
	must := func(what string, err error) {
		t.Helper()
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("%s: %v", what, err)
		}
	}

	rs := []replica{e.start("r1"), e.start("r2"), e.start("r3")}
	live := map[string]bool{"r1": true, "r2": true, "r3": true}
	dead := map[string]bool{}

	// Every member is owned by exactly one live replica, and every replica says so.
	holders := e.settled("every member owned by a live replica and synced", rs, dead, 2*time.Minute)
	// Replicas that joined later take their share once they have been live a lease duration:
	// wait until the owners hold still for three.
	stable, since := "", time.Now()
	harness.WaitFor(t, "ownership stable for three lease durations", 2*time.Minute, func() bool {
		h, _, err := e.fences(ctx)
		if err != nil {
			return false
		}
		now := fmt.Sprint(h)
		if now != stable {
			stable, since, holders = now, time.Now(), h
		}
		return time.Since(since) > 3*shardLease
	})
	// The Leases as kubectl shows them.
	k := newKubectl(t, "--kubeconfig", f.Kubeconfig(), "--context", names[0])
	out := k.ok("get", "leases", "-n", shardNS, "-l", "multicache.io/lease=fence", "-o", `jsonpath={range .items[*]}{.metadata.annotations.multicache\.io/cluster}={.spec.holderIdentity}{"\n"}{end}`)
	byKubectl := map[string]string{}
	for _, line := range strings.Fields(out) {
		c, h, _ := strings.Cut(line, "=")
		if _, dup := byKubectl[c]; dup {
			t.Errorf("kubectl: cluster %s has two fence Leases", c)
		}
		byKubectl[c] = h
	}
	for _, m := range e.members {
		if !live[byKubectl[m]] {
			t.Errorf("kubectl get leases: member %s is held by %q, not by one of r1, r2, r3: %v", m, byKubectl[m], byKubectl)
		}
	}
	t.Logf("owners: %v", byKubectl)

	e.equalTruth("steady state", rs, time.Minute)
	// From here on the seeded ConfigMaps are only updated (writeOps with keepStable): a
	// Reflector told that one is gone was told a delete nobody made.
	e.stable = func(key string) bool { return strings.Contains(key, "|"+scaleNS+"/cm-") }
	fos := []*follower{e.follow(rs[0]), e.follow(rs[1]), e.follow(rs[2])}
	e.followersEqualTruth("steady state", fos, time.Minute)
	// Wire clients that list, watch and relist whenever their watch ends, on every replica,
	// in both APIs' fleet views.
	var relisters []*relister
	for _, r := range rs {
		relisters = append(relisters, e.relist("Kubernetes API, fleet, on "+r.id, r, e.kubeWire(r, "")), e.relist("native API, fleet, on "+r.id, r, e.nativeWire(r)))
		if py := e.pythonRelister(r); py != nil {
			relisters = append(relisters, py)
		}
	}
	// A client-go informer on every member's /clusters/{name}, spread over the replicas.
	var informers []*clusterInformer
	for i, m := range e.members {
		informers = append(informers, e.informOn(rs[i%len(rs)], m))
	}

	// SIGKILL the biggest owner while writes run.
	count := map[string]int{}
	for _, h := range holders {
		count[h]++
	}
	victim := rs[0]
	for _, r := range rs {
		if count[r.id] > count[victim.id] {
			victim = r
		}
	}
	var lost []string
	for c, h := range holders {
		if h == victim.id {
			lost = append(lost, c)
		}
	}
	sort.Strings(lost)
	w := e.writeOps(10, true)
	time.Sleep(2 * time.Second)
	killed := time.Now()
	if err := victim.d.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	dead[victim.id], live[victim.id] = true, false
	var handoff time.Duration
	maxUnowned := 0
	for handoff == 0 {
		h, renewed, err := e.fences(ctx)
		if err == nil {
			n := len(unowned(e.members, h, renewed, dead))
			maxUnowned = max(maxUnowned, n)
			if n == 0 {
				handoff = time.Since(killed)
				holders = h
			}
		}
		if time.Since(killed) > 2*shardLease+5*time.Second {
			t.Fatalf("the clusters of the killed replica %s (%v) are not owned again %s after SIGKILL: %v", victim.id, lost, time.Since(killed), h)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("SIGKILL of %s, owner of %d clusters %v: owned again after %s (lease duration %s); at most %d clusters unowned meanwhile", victim.id, len(lost), lost, handoff.Round(10*time.Millisecond), shardLease, maxUnowned)
	if handoff > 2*shardLease+time.Second {
		t.Errorf("handoff took %s, more than two lease durations (%s) and a second of polling", handoff, 2*shardLease)
	}
	time.Sleep(3 * time.Second)
	w.end()
	t.Logf("writes during the kill: %d (failed: %d)", w.writes.Load(), w.errs.Load())
	var survivors []replica
	var survivingFollowers []*follower
	for i, r := range rs {
		if r.id != victim.id {
			survivors = append(survivors, r)
			survivingFollowers = append(survivingFollowers, fos[i])
		} else {
			fos[i].stop()
		}
	}
	e.equalTruth("after the SIGKILL", survivors, time.Minute)
	e.followersEqualTruth("after the SIGKILL", survivingFollowers, time.Minute)
	for _, fo := range survivingFollowers {
		if n := fo.invented.Load(); n > 0 {
			t.Errorf("through the SIGKILL, the Reflector on %s was told %d times that a ConfigMap nobody deleted is gone", fo.r.id, n)
		}
	}
	var survivingRelisters []*relister
	for _, rl := range relisters {
		if !strings.HasSuffix(rl.name, " on "+victim.id) {
			survivingRelisters = append(survivingRelisters, rl)
		}
	}
	var survivingInformers []*clusterInformer
	for _, ci := range informers {
		if !strings.HasPrefix(ci.name, "informer on "+victim.id+"/") {
			survivingInformers = append(survivingInformers, ci)
		}
	}
	harness.WaitFor(t, "every informer and relisting watcher on a survivor equal to the API servers", time.Minute, func() bool {
		truth := e.truth()
		for _, rl := range survivingRelisters {
			if got, _, _ := rl.snapshot(); len(harness.Diff(truth, got)) > 0 {
				return false
			}
		}
		for _, ci := range survivingInformers {
			if len(harness.Diff(onlyCluster(truth, ci.cluster), ci.state())) > 0 {
				return false
			}
		}
		return true
	})
	for _, ci := range survivingInformers {
		ci.mu.Lock()
		if len(ci.invented) > 0 {
			t.Errorf("through the SIGKILL, %s: %d deletes of ConfigMaps nobody deleted, e.g. %v", ci.name, len(ci.invented), ci.invented[:min(3, len(ci.invented))])
		}
		ci.mu.Unlock()
	}
	t.Logf("through the SIGKILL: %d informers and %d relisting watchers on survivors checked", len(survivingInformers), len(survivingRelisters))
	for _, rl := range survivingRelisters {
		_, invented, relists := rl.snapshot()
		if len(invented) > 0 {
			t.Errorf("through the SIGKILL, %s: %d deletes of ConfigMaps nobody deleted, e.g. %v", rl.name, len(invented), invented[:min(3, len(invented))])
		}
		t.Logf("%s: listed %d times (1 + relists)", rl.name, relists)
	}

	// A fourth replica joins under writes: some clusters move to it, none is unowned, and every
	// watch either ends with 410 or goes on delivering.
	watches := []*rawWatch{e.rawWatch(survivors[0]), e.rawWatch(survivors[1])}
	w = e.writeOps(5, true)
	readsBefore := e.memberReads()
	r4 := e.start("r4")
	live["r4"] = true
	joined := time.Now()
	maxUnowned = 0
	var moved []string
	for len(moved) == 0 {
		h, renewed, err := e.fences(ctx)
		if err == nil {
			maxUnowned = max(maxUnowned, len(unowned(e.members, h, renewed, dead)))
			for c, holder := range h {
				if holder == "r4" {
					moved = append(moved, c)
				}
			}
		}
		if time.Since(joined) > 6*shardLease+20*time.Second {
			t.Fatalf("no cluster moved to r4 in %s: %v", time.Since(joined), h)
		}
		time.Sleep(50 * time.Millisecond)
	}
	sort.Strings(moved)
	t.Logf("r4 joined: clusters %v moved to it %s after it was ready; at most %d clusters unowned meanwhile", moved, time.Since(joined).Round(10*time.Millisecond), maxUnowned)
	if maxUnowned > 0 {
		t.Errorf("while r4 joined, %d clusters had no live owner at once; want none", maxUnowned)
	}
	time.Sleep(2 * shardLease)
	if n := e.logMemberReads("while r4 joined and took "+strings.Join(moved, ", "), readsBefore, e.memberReads()); n > 0 {
		t.Errorf("clusters that moved between live replicas were listed again from their API servers %d times: a move hands the state over", n)
	}
	w.end()
	// One more change in every member: a watch still open must deliver it.
	for _, m := range e.members {
		cs, _ := f.Clientset(m)
		_, err := cs.CoreV1().ConfigMaps(scaleNS).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "marker"}}, metav1.CreateOptions{})
		must("marker", err)
	}
	harness.WaitFor(t, "every watch ended with 410 or delivered every member's marker", 30*time.Second, func() bool {
		for _, rw := range watches {
			rw.mu.Lock()
			ok := rw.ended != ""
			if !ok {
				ok = !slices.ContainsFunc(e.members, func(m string) bool { return !rw.seen[m+"|"+scaleNS+"/marker"] })
			}
			rw.mu.Unlock()
			if !ok {
				return false
			}
		}
		return true
	})
	for _, rw := range watches {
		rw.mu.Lock()
		if rw.ended != "" && !strings.Contains(rw.ended, "410") {
			t.Errorf("the watch on %s ended other than with 410: %s", rw.r.id, rw.ended)
		}
		t.Logf("raw watch on %s: %s", rw.r.id, map[bool]string{true: "ended: " + rw.ended, false: "open, delivered every marker"}[rw.ended != ""])
		rw.mu.Unlock()
	}
	all := append(survivors, r4)
	e.equalTruth("after r4 joined", all, time.Minute)
	e.followersEqualTruth("after r4 joined", append(survivingFollowers, e.follow(r4)), time.Minute)
	for _, fo := range survivingFollowers {
		if n := fo.invented.Load(); n > 0 {
			t.Errorf("through the SIGKILL and r4's join, the Reflector on %s was told %d times that a ConfigMap nobody deleted is gone", fo.r.id, n)
		}
	}

	// The query latency fan-out adds: the same fleet-wide list from a sharded replica and from
	// one replica that runs every cluster, alternating, in rounds.
	single := harness.StartDaemon(t, "--management-kubeconfig", f.Kubeconfig(), "--management-context", names[0],
		"--cluster-secrets-namespace", secretsNS, "--token-file", e.token, "--resource", scaleResource)
	single.Token = scaleToken
	one := replica{id: "single", d: single}
	harness.WaitFor(t, "the single replica synced", time.Minute, func() bool {
		var cl api.Clusters
		if e.get(one, api.ClustersPath, &cl) != nil || len(cl.Clusters) != len(e.members) {
			return false
		}
		return !slices.ContainsFunc(cl.Clusters, func(c api.Cluster) bool { return c.State != "Synced" })
	})
	rounds := harness.EnvInt("MULTICACHE_SCALE_ROUNDS", 5)
	per := harness.EnvInt("MULTICACHE_SCALE_QUERIES", 40)
	lat := map[string][][2]time.Duration{}
	for range rounds {
		samples := map[string][]time.Duration{}
		for range per {
			for _, r := range []replica{one, all[0]} {
				var l scaleList
				start := time.Now()
				if err := e.get(r, "/api/v1/namespaces/"+scaleNS+"/configmaps", &l); err != nil {
					t.Fatal(err)
				}
				samples[r.id] = append(samples[r.id], time.Since(start))
			}
		}
		for id, s := range samples {
			slices.Sort(s)
			lat[id] = append(lat[id], [2]time.Duration{s[len(s)/2], s[len(s)*99/100]})
		}
	}
	for _, id := range []string{one.id, all[0].id} {
		var p50s, p99s []time.Duration
		for _, v := range lat[id] {
			p50s, p99s = append(p50s, v[0]), append(p99s, v[1])
		}
		slices.Sort(p50s)
		slices.Sort(p99s)
		t.Logf("list of %s/configmaps in 6 clusters from %s: p50 %s (min %s, max %s), p99 %s (min %s, max %s); median of %d rounds of %d queries",
			scaleNS, id, p50s[len(p50s)/2], p50s[0], p50s[len(p50s)-1], p99s[len(p99s)/2], p99s[0], p99s[len(p99s)-1], rounds, per)
	}
}

// memberReads counts, per member API server (all its aliases together), the reads of whole
// collections the replicas sent it so far (their User-Agent is multicache/VERSION; the test's
// own clients' is multicache-fleet/…), from the API servers' audit logs.
func (e *scaleEnv) memberReads() map[string]fleet.Reads {
	e.t.Helper()
	out := map[string]fleet.Reads{}
	for _, m := range e.servers {
		c, _ := e.f.Cluster(m)
		r, err := c.ReadsBy("multicache/")
		if err != nil {
			e.t.Fatal(err)
		}
		out[m] = r
	}
	return out
}

// logMemberReads reports what the members served the replicas between two counts: full
// lists of the cached resource (LIST without continue, and watches with initial events),
// against the one full list of the fleet that a start costs.
func (e *scaleEnv) logMemberReads(what string, before, after map[string]fleet.Reads) int {
	e.t.Helper()
	total := 0
	var lines []string
	for _, m := range e.servers {
		d := after[m].Sub(before[m])
		n := d.Full[scaleResource]
		total += n
		lines = append(lines, fmt.Sprintf("%s %d (lists %d, pages %d, watch-lists %d; limit=1 probes %d, the inconsistency detector's exact lists %d, other watches %d)", m, n, d.Lists, d.ListPages, d.WatchLists, d.Probes, d.ExactLists, d.Watches))
	}
	e.t.Logf("full lists of %s the members served the replicas %s: %d over %d members, %.2f× one full list of the fleet; %s",
		scaleResource, what, total, len(e.members), float64(total)/float64(len(e.members)), strings.Join(lines, "; "))
	return total
}
