package bench

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/auth"
	"github.com/multicache/multicache/test/harness"
)

// S2.8: per-identity watches at width. One daemon over 1,000 clusters (5 API servers × 200
// contexts) with delegated auth against the first API server. 100 identities (ServiceAccounts)
// may each read a different tenth of the clusters (a window of 100 consecutive names, the
// windows 10 apart), and each holds 10 watches of the fleet view of ConfigMaps; one more
// identity may read every cluster. ConfigMaps are written at a steady rate, round robin over the
// API servers: each write is an event in each of its server's 200 clusters, and each watch sees
// the copies of the clusters its identity may read.
//
// Each round has two phases of the same length and rate: A, the unrestricted identity's single
// watch alone; B, the 1,000 per-identity watches with the unrestricted one beside them. A
// watch is opened after the identity's first (which fills its review cache), so no review is
// sent while the writes run (the run counts them). Every watch must see exactly the copies of
// the clusters its identity may read, and none of the others.

const identityConfig = `kubeconfig:
  paths: [%q]
resources:
  - name: configmaps
server:
  maxWatches: %d
`

// identityNS holds the writes, in every API server.
const identityNS = "s28"

// idWatch is one open watch and what it saw.
type idWatch struct {
	identity int // -1: the unrestricted identity
	allowed  map[string]bool
	body     io.ReadCloser
	events   atomic.Int64
	foreign  atomic.Int64 // events of clusters the identity may not read
	mu       sync.Mutex
	lat      []time.Duration
	done     chan struct{}
}

// idPhase is what one phase measured.
type idPhase struct {
	events, expected int64
	p50, p99         time.Duration
	unrestricted99   time.Duration // phase B: the unrestricted watch beside the others
	cpu              time.Duration // the daemon's CPU while the writes ran and drained
	// Meanwhile, the CPU of this process (the watches' readers and the writer), of the API
	// servers with etcd, and of the whole machine.
	readersCPU, serversCPU, busy time.Duration
	took                         time.Duration
	reviews                      float64 // reviews the daemon sent meanwhile
	writes, watches              int
	eventsPerWriteAvg            float64
}

func BenchmarkIdentityWatches(b *testing.B) {
	servers := harness.EnvInt("MULTICACHE_BENCH_S28_SERVERS", 5)
	aliases := harness.EnvInt("MULTICACHE_BENCH_S28_ALIASES", 200)
	identities := harness.EnvInt("MULTICACHE_BENCH_S28_IDENTITIES", 100)
	watchesEach := harness.EnvInt("MULTICACHE_BENCH_S28_WATCHES", 10)
	rate := float64(harness.EnvInt("MULTICACHE_BENCH_S28_WRITE_RATE", 2))
	seconds := harness.EnvInt("MULTICACHE_BENCH_S28_SECONDS", 60)
	rounds := harness.EnvInt("MULTICACHE_BENCH_S28_RUNS", 5)
	env := harness.Start(b, harness.Options{Clusters: servers, Timeout: 3 * time.Hour})
	ctx, f := env.Ctx, env.Fleet
	dir := b.TempDir()
	aliasPath := filepath.Join(dir, "aliases.kubeconfig")
	names, err := f.WriteAliases(aliasPath, aliases)
	if err != nil {
		b.Fatal(err)
	}
	cfgPath := filepath.Join(dir, "multicache.yaml")
	if err := os.WriteFile(cfgPath, []byte(fmt.Sprintf(identityConfig, aliasPath, identities*watchesEach+100)), 0o600); err != nil {
		b.Fatal(err)
	}
	writers := map[string]kubernetes.Interface{}
	for _, name := range f.Names() {
		cs, err := f.Clientset(name)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: identityNS}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		writers[name] = cs
	}
	mgmt := writers[f.Names()[0]]
	// The identities: reader-i may get the clusters of its window; reader-all may list them all.
	window := len(names) / 10
	allowed := make([]map[string]bool, identities)
	tokens := make([]string, identities)
	grant := func(sa string, rule rbacv1.PolicyRule) string {
		if _, err := mgmt.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		if _, err := mgmt.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "s28-" + sa}, Rules: []rbacv1.PolicyRule{rule}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		if _, err := mgmt.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "s28-" + sa},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "s28-" + sa},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: "default"}}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		ttl := int64(3 * 3600)
		tr, err := mgmt.CoreV1().ServiceAccounts("default").CreateToken(ctx, sa, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &ttl}}, metav1.CreateOptions{})
		if err != nil {
			b.Fatal(err)
		}
		return tr.Status.Token
	}
	for i := range identities {
		start := (i * len(names) / identities) % len(names)
		var mine []string
		allowed[i] = map[string]bool{}
		for j := range window {
			c := names[(start+j)%len(names)]
			mine = append(mine, c)
			allowed[i][c] = true
		}
		tokens[i] = grant(fmt.Sprintf("reader-%d", i), rbacv1.PolicyRule{APIGroups: []string{auth.Group}, Resources: []string{auth.Resource}, ResourceNames: mine, Verbs: []string{"get"}})
	}
	everyone := map[string]bool{}
	for _, c := range names {
		everyone[c] = true
	}
	allToken := grant("reader-all", rbacv1.PolicyRule{APIGroups: []string{auth.Group}, Resources: []string{auth.Resource}, Verbs: []string{"get", "list"}})

	bin := harness.Binary(b)
	addr := harness.FreePort(b)
	d := startScaleProc(b, bin, "s28", addr, "--config", cfgPath, "--auth", "delegated",
		"--management-kubeconfig", f.Kubeconfig(), "--management-context", f.Names()[0])
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4096, DisableCompression: true}}
	get := func(path, token string) ([]byte, int, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, d.url+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
		if err != nil {
			return nil, 0, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return body, resp.StatusCode, err
	}
	startedAt := time.Now()
	for {
		body, code, err := get(api.ClustersPath, allToken)
		var cl api.Clusters
		if err == nil && code == http.StatusOK && json.Unmarshal(body, &cl) == nil {
			synced := 0
			for _, c := range cl.Clusters {
				if c.State == "Synced" {
					synced++
				}
			}
			if synced == len(names) {
				break
			}
		}
		if time.Since(startedAt) > time.Duration(harness.EnvInt("MULTICACHE_BENCH_S28_SYNC_MINUTES", 30))*time.Minute {
			b.Fatalf("not every cluster synced within %s; the last answer: %d %v %.500s", time.Since(startedAt).Round(time.Second), code, err, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	b.Logf("%d clusters synced %s after start", len(names), time.Since(startedAt).Round(time.Second))

	// sent[g] is when write g of the run was sent (UnixNano).
	var sent []atomic.Int64
	open := func(identity int, token, label string, allow map[string]bool) *idWatch {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, d.url+"/api/v1/namespaces/"+identityNS+"/configmaps?watch=true&labelSelector=s28%3D"+label, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(req)
		if err != nil {
			b.Fatalf("identity %d: watch: %v", identity, err)
		}
		if resp.StatusCode != http.StatusOK {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			b.Fatalf("identity %d: watch: %d %.300s", identity, resp.StatusCode, body)
		}
		w := &idWatch{identity: identity, allowed: allow, body: resp.Body, done: make(chan struct{})}
		go func() {
			defer close(w.done)
			r := bufio.NewReaderSize(resp.Body, 64<<10)
			namePrefix := []byte(`"name":"` + label + `-`)
			clusterKey := []byte(`"` + api.ClusterAnnotation + `":"`)
			for {
				line, err := r.ReadSlice('\n')
				if err == bufio.ErrBufferFull {
					b.Errorf("identity %d: a watch event longer than 64 KiB", identity)
					return
				}
				if err != nil {
					return
				}
				at := time.Now()
				if !bytes.HasPrefix(line, []byte(`{"type":"ADDED"`)) {
					continue
				}
				k := bytes.Index(line, namePrefix)
				c := bytes.Index(line, clusterKey)
				if k < 0 || c < 0 {
					continue
				}
				digits := line[k+len(namePrefix):]
				digits = digits[:max(0, bytes.IndexByte(digits, '"'))]
				i, err := strconv.Atoi(string(digits))
				cluster := line[c+len(clusterKey):]
				cluster = cluster[:max(0, bytes.IndexByte(cluster, '"'))]
				if !w.allowed[string(cluster)] {
					w.foreign.Add(1)
					continue
				}
				w.events.Add(1)
				if err == nil && i >= 0 && i < len(sent) {
					if s := sent[i].Load(); s > 0 {
						w.mu.Lock()
						w.lat = append(w.lat, at.Sub(time.Unix(0, s)))
						w.mu.Unlock()
					}
				}
			}
		}()
		return w
	}
	reviews := func() float64 {
		body, _, err := get("/metrics", allToken)
		if err != nil {
			b.Fatal(err)
		}
		var n float64
		for _, line := range strings.Split(string(body), "\n") {
			if strings.HasPrefix(line, "multicache_auth_reviews_sent_total") {
				_, v, _ := strings.Cut(line, " ")
				x, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
				n += x
			}
		}
		return n
	}
	serverNames := f.Names()
	clustersOf := map[string][]string{}
	for _, c := range names {
		clustersOf[serverOf(c)] = append(clustersOf[serverOf(c)], c)
	}
	writes := int(rate * float64(seconds))
	// Every write of the run has its own number, the name's suffix, and its send time there.
	sent = make([]atomic.Int64, 2*rounds*writes)
	next := 0
	// The per-identity watches (label "b") open once, before any write, identities 8 at a time; each opens its
	// first watch (filling its review cache), then the rest one after another. They stay open
	// for every round, idle during phase A (their selector matches none of its writes).
	openStart, reviewsBefore := time.Now(), reviews()
	var perIdentity []*idWatch
	{
		var mu sync.Mutex
		sem := make(chan struct{}, 8)
		var wg sync.WaitGroup
		for i := range identities {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				mine := []*idWatch{open(i, tokens[i], "b", allowed[i])}
				for range watchesEach - 1 {
					mine = append(mine, open(i, tokens[i], "b", allowed[i]))
				}
				mu.Lock()
				perIdentity = append(perIdentity, mine...)
				mu.Unlock()
			}()
		}
		wg.Wait()
	}
	opened, openReviews := time.Since(openStart), reviews()-reviewsBefore
	// The unrestricted watch beside them in phase B, open as long (a watch opened later would
	// start with every earlier round's objects).
	beside := open(-1, allToken, "b", everyone)
	b.Logf("%d per-identity watches opened in %s (%.0f reviews sent)", len(perIdentity), opened.Round(100*time.Millisecond), openReviews)
	phase := func(label string, ws []*idWatch) idPhase {
		var ph idPhase
		for _, w := range ws {
			w.events.Store(0)
			w.foreign.Store(0)
			w.mu.Lock()
			w.lat = nil
			w.mu.Unlock()
		}
		ph.watches = len(ws)
		time.Sleep(2 * time.Second)
		reviews0 := reviews()
		cpu0 := procCPU(d.cmd.Process.Pid)
		readers0, servers0, busy0 := procCPU(os.Getpid()), cpuOf(f.PIDs()), ceilingBusy()
		start := time.Now()
		tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
		var expected int64
		for i := range writes {
			<-tick.C
			server := serverNames[i%len(serverNames)]
			for _, w := range ws {
				for _, c := range clustersOf[server] {
					if w.allowed[c] {
						expected++
					}
				}
			}
			g := next
			next++
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", label, g), Labels: map[string]string{"s28": label}}, Data: map[string]string{"i": strconv.Itoa(g)}}
			sent[g].Store(time.Now().UnixNano())
			if _, err := writers[server].CoreV1().ConfigMaps(identityNS).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
				b.Fatalf("create %s in %s: %v", cm.Name, server, err)
			}
		}
		tick.Stop()
		// Drain: every watch has all its copies, or a minute passed.
		deadline := time.Now().Add(time.Minute)
		for {
			var got int64
			for _, w := range ws {
				got += w.events.Load()
			}
			if got >= expected || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		ph.took = time.Since(start)
		ph.cpu = procCPU(d.cmd.Process.Pid) - cpu0
		ph.readersCPU, ph.serversCPU, ph.busy = procCPU(os.Getpid())-readers0, cpuOf(f.PIDs())-servers0, ceilingBusy()-busy0
		ph.reviews = reviews() - reviews0
		var lat, unres []time.Duration
		for _, w := range ws {
			ph.events += w.events.Load()
			if n := w.foreign.Load(); n > 0 {
				b.Fatalf("phase %s: identity %d's watch saw %d events of clusters it may not read", label, w.identity, n)
			}
			w.mu.Lock()
			if w.identity < 0 {
				unres = append(unres, w.lat...)
			} else {
				lat = append(lat, w.lat...)
			}
			w.mu.Unlock()
		}
		ph.expected, ph.writes = expected, writes
		if ph.events != expected {
			b.Fatalf("phase %s: the watches saw %d events, %d expected", label, ph.events, expected)
		}
		slices.Sort(unres)
		slices.Sort(lat)
		if len(lat) == 0 {
			lat = unres
		}
		ph.p50, ph.p99 = lat[len(lat)/2], lat[min(len(lat)-1, len(lat)*99/100)]
		ph.unrestricted99 = unres[min(len(unres)-1, len(unres)*99/100)]
		ph.eventsPerWriteAvg = float64(ph.events) / float64(writes)
		b.Logf("phase %s: %d watches; %d writes in %s: %d events (%.0f a write); p50 %s p99 %s (the unrestricted watch: p99 %s); daemon CPU %s (%.2f µs an event); readers %s, API servers %s, machine busy %.0f%%; reviews sent %.0f",
			label, ph.watches, writes, ph.took.Round(100*time.Millisecond), ph.events, ph.eventsPerWriteAvg, ph.p50, ph.p99, ph.unrestricted99, ph.cpu, float64(ph.cpu.Microseconds())/float64(ph.events),
			ph.readersCPU, ph.serversCPU, 100*ph.busy.Seconds()/ph.took.Seconds()/float64(runtime.NumCPU()), ph.reviews)
		return ph
	}
	type idRound struct{ alone, width idPhase }
	var rr []idRound
	for k := 1; k <= rounds; k++ {
		var r idRound
		// Phase A: a fresh unrestricted watch of its own writes, closed after them.
		label := fmt.Sprintf("a%d", k)
		alone := open(-1, allToken, label, everyone)
		r.alone = phase(label, []*idWatch{alone})
		alone.body.Close()
		<-alone.done
		for _, cs := range writers {
			if err := cs.CoreV1().ConfigMaps(identityNS).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "s28=" + label}); err != nil {
				b.Fatal(err)
			}
		}
		// Phase B: the per-identity watches, and the unrestricted one beside them. B's objects
		// stay: deleting them would send each watch its copies again.
		r.width = phase("b", append(slices.Clone(perIdentity), beside))
		rr = append(rr, r)
	}
	col := func(get func(idRound) float64) []float64 { return column(rr, get) }
	msOf := func(get func(idRound) time.Duration) string {
		return ceilingSpread(col(func(r idRound) float64 { return float64(get(r)) / float64(time.Millisecond) }), "%.1f ms")
	}
	ratio := col(func(r idRound) float64 { return float64(r.width.p99) / float64(r.alone.p99) })
	besideRatio := col(func(r idRound) float64 { return float64(r.width.p99) / float64(r.width.unrestricted99) })
	perEvent := col(func(r idRound) float64 { return float64(r.width.cpu.Nanoseconds()) / 1e3 / float64(r.width.events) })
	aloneEvent := col(func(r idRound) float64 { return float64(r.alone.cpu.Nanoseconds()) / 1e3 / float64(r.alone.events) })
	marginal := col(func(r idRound) float64 {
		return float64((r.width.cpu - r.alone.cpu).Nanoseconds()) / 1e3 / float64(r.width.events-r.alone.events)
	})
	cpuShare := col(func(r idRound) float64 { return r.width.cpu.Seconds() / r.width.took.Seconds() })
	share := func(get func(idPhase) time.Duration, ph func(idRound) idPhase) string {
		return ceilingSpread(col(func(r idRound) float64 { return get(ph(r)).Seconds() / ph(r).took.Seconds() }), "%.2f")
	}
	phA := func(r idRound) idPhase { return r.alone }
	phB := func(r idRound) idPhase { return r.width }
	readers := func(p idPhase) time.Duration { return p.readersCPU }
	apiservers := func(p idPhase) time.Duration { return p.serversCPU }
	busy := func(p idPhase) time.Duration { return p.busy }
	note := fmt.Sprintf("median (min–max) of %d rounds", rounds)
	recordGoals(b, goal{ID: "S2.8", Figure: "per-identity watch, write → watch p99 ÷ an unrestricted watch's", Goal: "≤ 2×",
		Measured: fmt.Sprintf("%s (%s vs %s alone), %d identities × %d watches over %d clusters; %s", ceilingSpread(ratio, "%.2f×"), msOf(func(r idRound) time.Duration { return r.width.p99 }), msOf(func(r idRound) time.Duration { return r.alone.p99 }), identities, watchesEach, len(names), note),
		Met:      met(median(ratio) <= 2)})
	var rows []string
	for i, r := range rr {
		rows = append(rows, fmt.Sprintf("| %d | %s / %s | %s / %s (unrestricted beside: %s) | %.2f× | %d / %d | %s / %s | %.2f / %.2f | %.0f / %.0f |",
			i+1, r.alone.p50, r.alone.p99, r.width.p50, r.width.p99, r.width.unrestricted99, float64(r.width.p99)/float64(r.alone.p99),
			r.alone.events, r.width.events, r.alone.cpu.Round(time.Millisecond), r.width.cpu.Round(time.Millisecond),
			float64(r.alone.cpu.Nanoseconds())/1e3/float64(r.alone.events), float64(r.width.cpu.Nanoseconds())/1e3/float64(r.width.events), r.alone.reviews, r.width.reviews))
	}
	first := rr[0].width
	writeSection(b, "S2.8: per-identity watches at width", fmt.Sprintf(`%s

One daemon over %d clusters (%d kube-apiservers, each seen through %d kubeconfig contexts), with
delegated auth against the first API server (TokenReview, SubjectAccessReview; the review
cache at its defaults, 1 m allowed and 10 s denied). %d identities (ServiceAccounts) may each
get a different tenth of the clusters (%d consecutive names, windows %d apart); each holds %d
watches of the fleet view of ConfigMaps in one namespace (`+"`/api/v1/namespaces/%s/configmaps?watch=true`"+`).
One more identity may list every cluster. ConfigMaps are created at %.0f/s for %d s, round
robin over the API servers: each write is an event in its server's %d clusters, and each
watch sees the copies of the clusters its identity may read (%.0f copies a write over the %d
watches of phase B).

The %d per-identity watches open once, before the rounds, and stay open; the watches of an
identity open after its first, which sends its reviews (one per cluster, 16 at a time, then cached). Each
round: phase A, one unrestricted watch of A's own writes (the per-identity watches idle: their
selector matches none of them); phase B, the per-identity watches and an unrestricted one
beside them. The writes start 2 s after the phase's watches are open. Latency is per delivered copy: from just before the create to the line's
arrival at the reader, over every copy every watch saw. CPU is the daemon's (utime + stime)
from the first write until every watch had all its copies. Every watch saw exactly the
copies of the clusters its identity may read, none of another cluster (checked each phase).

| figure | phase A: one unrestricted watch | phase B: %d per-identity watches | ratio | goal |
|---|---|---|---|---|
| write → watch p50 | %s | %s | | |
| write → watch p99 | %s | %s (the unrestricted watch beside them: %s) | S2.8: %s (B ÷ A); %s (B ÷ the unrestricted beside) | ≤ 2× |
| daemon CPU an event delivered to a watch | %s µs | %s µs (marginal over phase A: %s µs) | | |
| daemon CPU while the writes ran, in cores | | %s | | |
| this process's CPU (the watches' readers, the writer), in cores | %s | %s | | |
| the API servers' and etcds' CPU, in cores | %s | %s | | |
| the machine's busy CPU, in cores of %d | %s | %s | | |
| opening the per-identity watches, once (reviews sent meanwhile) | | %s (%s) | | |

Each round:

| round | A: p50 / p99 | B: p50 / p99 | p99 ratio | events A / B | daemon CPU A / B | µs an event A / B | reviews sent A / B |
|---|---|---|---|---|---|---|---|
%s

Command: `+"`make bench-identities`"+` (`+"`MULTICACHE_BENCH_S28_RUNS=%d go test -run '^$' -bench IdentityWatches -benchtime 1x -timeout 3h -v ./test/bench/`"+`)
`, machineLine(), len(names), servers, aliases, identities, window, len(names)/identities, watchesEach, identityNS, rate, seconds, aliases,
		first.eventsPerWriteAvg, first.watches, identities*watchesEach, identities*watchesEach,
		msOf(func(r idRound) time.Duration { return r.alone.p50 }), msOf(func(r idRound) time.Duration { return r.width.p50 }),
		msOf(func(r idRound) time.Duration { return r.alone.p99 }), msOf(func(r idRound) time.Duration { return r.width.p99 }), msOf(func(r idRound) time.Duration { return r.width.unrestricted99 }),
		ceilingSpread(ratio, "%.2f×"), ceilingSpread(besideRatio, "%.2f×"),
		ceilingSpread(aloneEvent, "%.2f"), ceilingSpread(perEvent, "%.2f"), ceilingSpread(marginal, "%.2f"),
		ceilingSpread(cpuShare, "%.2f"),
		share(readers, phA), share(readers, phB), share(apiservers, phA), share(apiservers, phB),
		runtime.NumCPU(), share(busy, phA), share(busy, phB),
		opened.Round(100*time.Millisecond), fmt.Sprintf("%.0f", openReviews),
		strings.Join(rows, "\n"), rounds))
}
