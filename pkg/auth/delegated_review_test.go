package auth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// management is a management cluster's review endpoints: the token "alice-token" is alice in
// group dev; alice may get cluster fleet-1 and its secrets; bob (by certificate) may list
// every cluster. It counts the reviews it answers.
type management struct {
	mu                 sync.Mutex
	tokenReviews, sars int
}

func (m *management) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	switch r.URL.Path {
	case "/apis/authentication.k8s.io/v1/tokenreviews":
		var tr authenticationv1.TokenReview
		if err := json.NewDecoder(r.Body).Decode(&tr); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		m.mu.Lock()
		m.tokenReviews++
		m.mu.Unlock()
		if tr.Spec.Token == "alice-token" {
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "alice", Groups: []string{"dev"}}}
		}
		tr.APIVersion, tr.Kind = "authentication.k8s.io/v1", "TokenReview"
		_ = json.NewEncoder(w).Encode(&tr)
	case "/apis/authorization.k8s.io/v1/subjectaccessreviews":
		var sar authorizationv1.SubjectAccessReview
		if err := json.NewDecoder(r.Body).Decode(&sar); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		m.mu.Lock()
		m.sars++
		m.mu.Unlock()
		ra := sar.Spec.ResourceAttributes
		switch {
		case ra == nil || ra.Group != Group || ra.Resource != Resource:
		case sar.Spec.User == "bob" && ra.Verb == "list" && ra.Name == "":
			sar.Status.Allowed = true
		case sar.Spec.User == "alice" && ra.Verb == "get" && ra.Name == "fleet-1" && (ra.Subresource == "" || ra.Subresource == SecretsSubresource):
			sar.Status.Allowed = true
		}
		sar.APIVersion, sar.Kind = "authorization.k8s.io/v1", "SubjectAccessReview"
		_ = json.NewEncoder(w).Encode(&sar)
	default:
		http.NotFound(w, r)
	}
}

func (m *management) counts() (int, int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.tokenReviews, m.sars
}

func bearer(token string) *http.Request {
	r, _ := http.NewRequest(http.MethodGet, "https://replica/api/v1/pods", nil)
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	return r
}

// TestDelegatedReviews: a caller's token is a TokenReview, and each access question a
// SubjectAccessReview on clusters.multicache.io, both cached; every refusal is a 401 that
// names no address of the management cluster.
func TestDelegatedReviews(t *testing.T) {
	mgmt := &management{}
	srv := httptest.NewServer(mgmt)
	t.Cleanup(srv.Close)
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	ca := newTestCA(t, "client-ca")
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, ca.pem, 0o600); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	d, err := New(Options{Client: cs, ClientCAFile: caFile, Metrics: reg})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	a, err := d.Authorize(bearer("alice-token"))
	if err != nil {
		t.Fatalf("alice's token: %v", err)
	}
	u := a.(interface{ User() user.Info }).User()
	if u.GetName() != "alice" || !strings.Contains(strings.Join(u.GetGroups(), ","), "dev") ||
		!strings.Contains(strings.Join(u.GetGroups(), ","), user.AllAuthenticated) {
		t.Errorf("alice's token is %q in %v, want alice in dev and %s", u.GetName(), u.GetGroups(), user.AllAuthenticated)
	}
	for _, tc := range []struct {
		cluster       string
		secrets, want bool
	}{{"fleet-1", false, true}, {"fleet-1", true, true}, {"fleet-2", false, false}, {"fleet-2", true, false}} {
		if ok, err := a.Cluster(ctx, tc.cluster, tc.secrets); err != nil || ok != tc.want {
			t.Errorf("alice on %s (secrets %v): %v, %v; want %v", tc.cluster, tc.secrets, ok, err, tc.want)
		}
	}
	if ok, _ := a.All(ctx); ok {
		t.Error("alice may list every cluster, which the management cluster denies")
	}

	// The caches answer what was asked before: the same token and the same questions again
	// send nothing.
	tokens, sars := mgmt.counts()
	a2, err := d.Authorize(bearer("alice-token"))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = a2.Cluster(ctx, "fleet-1", true)
	_, _ = a2.Cluster(ctx, "fleet-2", false)
	if t2, s2 := mgmt.counts(); t2 != tokens || s2 != sars {
		t.Errorf("asked again: %d token and %d access reviews sent, want none (cached)", t2-tokens, s2-sars)
	}
	if got := counterValue(d.m.sent, "token"); got != float64(tokens) {
		t.Errorf("multicache_auth_reviews_sent_total{review=token} = %v, want %d (the reviews the server got)", got, tokens)
	}
	if got := counterValue(d.m.sent, "access"); got != float64(sars) {
		t.Errorf("multicache_auth_reviews_sent_total{review=access} = %v, want %d (the reviews the server got)", got, sars)
	}
	ratios := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "multicache_auth_review_cache_hit_ratio" {
			for _, m := range mf.GetMetric() {
				ratios[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
			}
		}
	}
	if len(ratios) != 2 || ratios["token"] <= 0 || ratios["access"] <= 0 || ratios["token"] > 1 {
		t.Errorf("hit ratios %v, want token and access, each in (0, 1]", ratios)
	}

	// A client certificate the client CA signed is its CommonName, with no review.
	bob := bearer("")
	bob.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{ca.client(t, "bob")}}
	ab, err := d.Authorize(bob)
	if err != nil {
		t.Fatalf("bob's certificate: %v", err)
	}
	if ok, err := ab.Cluster(ctx, "fleet-9", true); err == nil && ok {
		t.Error("bob reads fleet-9's secrets; the management cluster allows only list on clusters")
	}
	if ok, err := ab.Cluster(ctx, "fleet-9", false); err != nil || !ok {
		t.Errorf("bob, who may list every cluster, on fleet-9: %v, %v", ok, err)
	}

	for name, r := range map[string]*http.Request{"no credentials": bearer(""), "a token the management cluster rejects": bearer("mallory")} {
		if _, err := d.Authorize(r); !errors.Is(err, ErrUnauthenticated) {
			t.Errorf("%s: %v, want ErrUnauthenticated", name, err)
		}
	}
	other := newTestCA(t, "other-ca")
	forged := bearer("")
	forged.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{other.client(t, "bob")}}
	if _, err := d.Authorize(forged); !errors.Is(err, ErrUnauthenticated) || strings.Contains(err.Error(), "authority") {
		t.Errorf("a certificate another CA signed: %v, want ErrUnauthenticated without the cause", err)
	}

	// The management cluster gone: access is an error that does not name its address.
	srv.Close()
	_, err = d.AccessFor(&user.DefaultInfo{Name: "carol"}).Cluster(ctx, "fleet-1", false)
	if err == nil || strings.Contains(err.Error(), strings.TrimPrefix(srv.URL, "http://")) {
		t.Errorf("access with the management cluster gone: %v, want an error without its address", err)
	}
}

// TestDelegatedOptions: what New refuses, naming the setting.
func TestDelegatedOptions(t *testing.T) {
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "bad.crt")
	if err := os.WriteFile(bad, []byte("not pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	if _, err := New(Options{Client: cs, Metrics: reg}); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		opts Options
		want string
	}{
		"no client":            {Options{}, "management cluster"},
		"negative TTL":         {Options{Client: cs, DenyTTL: -1}, "negative"},
		"missing client CA":    {Options{Client: cs, ClientCAFile: "/nonexistent/ca.crt"}, "server.tls.clientCAFile"},
		"client CA not PEM":    {Options{Client: cs, ClientCAFile: bad}, "server.tls.clientCAFile"},
		"metrics twice in one": {Options{Client: cs, Metrics: reg}, "metrics"},
	} {
		if _, err := New(tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %q", name, err, tc.want)
		}
	}
}

// TestAccessInContext: a context without a caller's access reads everything (auth off); with
// one, it is that caller's.
func TestAccessInContext(t *testing.T) {
	ctx := context.Background()
	if _, ok := AccessOf(ctx).(Everything); !ok {
		t.Errorf("AccessOf an empty context is %T, want Everything", AccessOf(ctx))
	}
	a := &access{user: &user.DefaultInfo{Name: "alice"}}
	if got := AccessOf(WithAccess(ctx, a)); got != a {
		t.Errorf("AccessOf(WithAccess(a)) = %v, want a", got)
	}
}

// slowManagement answers access reviews as management does, each only once a second one is in
// flight beside it (or after a second), and records whether any ever was. While hold is
// open, it answers none.
type slowManagement struct {
	management
	mu       sync.Mutex
	inflight int
	sawTwo   bool
	second   chan struct{}
	hold     chan struct{}
}

func (m *slowManagement) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m.mu.Lock()
	m.inflight++
	if m.inflight >= 2 && !m.sawTwo {
		m.sawTwo = true
		close(m.second)
	}
	hold := m.hold
	m.mu.Unlock()
	select {
	case <-m.second:
	case <-time.After(time.Second):
	}
	if hold != nil {
		<-hold
	}
	m.management.ServeHTTP(w, r)
	m.mu.Lock()
	m.inflight--
	m.mu.Unlock()
}

// holdUntil holds every review until cond, then answers them.
func (m *slowManagement) holdUntil(t *testing.T, cond func() bool) {
	t.Helper()
	hold := make(chan struct{})
	m.mu.Lock()
	m.hold = hold
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.hold = nil
		m.mu.Unlock()
		close(hold)
	}()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the callers did not all ask within 30 s")
		}
	}
}

// TestDelegatedFleetQuestion: one question about many clusters sends its reviews side by side,
// and callers who ask the same questions at once share one review per question: a caller's
// watches opened together cost the reviews of one. A caller who gives up does not end the
// review for the others.
func TestDelegatedFleetQuestion(t *testing.T) {
	mgmt := &slowManagement{second: make(chan struct{})}
	srv := httptest.NewServer(mgmt)
	t.Cleanup(srv.Close)
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL, QPS: -1})
	if err != nil {
		t.Fatal(err)
	}
	// The denials are kept for an hour: no answer expires while the test runs, however slowly.
	d, err := New(Options{Client: cs, Parallel: 8, DenyTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 40)
	for i := range names {
		names[i] = fmt.Sprintf("fleet-%d", i)
	}
	// One caller's question is sent side by side.
	if _, err := d.AccessFor(&user.DefaultInfo{Name: "dave"}).(BatchAccess).Clusters(context.Background(), names, false); err != nil {
		t.Fatal(err)
	}
	mgmt.mu.Lock()
	sawTwo := mgmt.sawTwo
	mgmt.mu.Unlock()
	if !sawTwo {
		t.Error("the reviews of one fleet question were sent one at a time")
	}

	// Five callers ask at once: every one has asked (list on clusters) before the first review
	// is answered, so the caches alone cannot explain one review per question.
	lookups := func() float64 { return counterValue(d.m.lookups, "access") }
	_, before := mgmt.counts()
	asked := lookups()
	alice := &user.DefaultInfo{Name: "alice", Groups: []string{"dev"}}
	const callers = 5
	answers := make([][]bool, callers)
	errs := make([]error, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			// Each caller is a request of its own, with an Access of its own.
			answers[i], errs[i] = d.AccessFor(alice).(BatchAccess).Clusters(context.Background(), names, false)
		})
	}
	mgmt.holdUntil(t, func() bool { return lookups() >= asked+callers })
	wg.Wait()
	for i := range callers {
		if errs[i] != nil {
			t.Fatalf("caller %d: %v", i, errs[i])
		}
		for j, ok := range answers[i] {
			if want := names[j] == "fleet-1"; ok != want {
				t.Errorf("caller %d: alice on %s: %v, want %v", i, names[j], ok, want)
			}
		}
	}
	if _, sars := mgmt.counts(); sars-before != 1+len(names) {
		t.Errorf("%d callers asking about %d clusters at once sent %d access reviews, want %d (list on clusters, then get on each, once)",
			callers, len(names), sars-before, 1+len(names))
	}

	// Through Clusters, an Access that cannot batch answers the same, one at a time.
	got, err := Clusters(context.Background(), Everything{}, names, true)
	if err != nil || len(got) != len(names) || slices.Contains(got, false) {
		t.Errorf("Clusters(Everything) = %v, %v; want all true", got, err)
	}

	// Two callers wait for the same review; one gives up. It stops waiting; the other gets
	// the answer of the one review.
	_, before = mgmt.counts()
	asked = lookups()
	carol := &user.DefaultInfo{Name: "carol"}
	quitter, cancel := context.WithCancel(context.Background())
	var quitErr, stayErr error
	var stayOK bool
	wg.Go(func() { _, quitErr = d.AccessFor(carol).Cluster(quitter, "fleet-1", false) })
	wg.Go(func() { stayOK, stayErr = d.AccessFor(carol).Cluster(context.Background(), "fleet-1", false) })
	mgmt.holdUntil(t, func() bool {
		if lookups() >= asked+2 {
			cancel()
			return true
		}
		return false
	})
	wg.Wait()
	if !errors.Is(quitErr, context.Canceled) {
		t.Errorf("the caller who gave up: %v, want context.Canceled", quitErr)
	}
	if stayErr != nil || stayOK {
		t.Errorf("the caller who waited: %v, %v; want false (carol may read nothing)", stayOK, stayErr)
	}
	if _, sars := mgmt.counts(); sars-before != 2 {
		t.Errorf("carol's two callers sent %d reviews, want 2 (list on clusters, get on fleet-1)", sars-before)
	}
	// A caller whose context has ended sends nothing.
	_, before = mgmt.counts()
	if _, err := d.AccessFor(&user.DefaultInfo{Name: "erin"}).(BatchAccess).Clusters(quitter, names, false); !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled caller: %v, want context.Canceled", err)
	}
	if _, sars := mgmt.counts(); sars != before {
		t.Errorf("a cancelled caller sent %d reviews, want none", sars-before)
	}
}

// clockedManagement answers as management does, and each access review moves the clock on by
// step: a fleet question can take longer than a denial is cached.
type clockedManagement struct {
	management
	now  atomic.Int64 // UnixNano
	step atomic.Int64
}

func (m *clockedManagement) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasSuffix(r.URL.Path, "/subjectaccessreviews") {
		m.now.Add(m.step.Load())
	}
	m.management.ServeHTTP(w, r)
}

// TestDelegatedAnswersOutlastTheQuestion: a fleet question's answers are kept for their TTL
// from when the whole question was answered, however long it took; an answer read from the
// cache is not kept longer for being read; and the cache holds as many as CacheEntries allows
// (the webhook authorizer alone keeps 8,192).
func TestDelegatedAnswersOutlastTheQuestion(t *testing.T) {
	mgmt := &clockedManagement{}
	mgmt.now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	mgmt.step.Store(int64(time.Second))
	srv := httptest.NewServer(mgmt)
	t.Cleanup(srv.Close)
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL, QPS: -1})
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(Options{Client: cs, DenyTTL: 10 * time.Second, AllowTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	d.answers.now = func() time.Time { return time.Unix(0, mgmt.now.Load()) }
	ctx := context.Background()
	alice := &user.DefaultInfo{Name: "alice", Groups: []string{"dev"}}
	ask := func(names []string) int {
		t.Helper()
		_, before := mgmt.counts()
		got, err := d.AccessFor(alice).(BatchAccess).Clusters(ctx, names, false)
		if err != nil {
			t.Fatal(err)
		}
		for i, ok := range got {
			if want := names[i] == "fleet-1"; ok != want {
				t.Fatalf("alice on %s: %v, want %v", names[i], ok, want)
			}
		}
		_, after := mgmt.counts()
		return after - before
	}
	wait := func(d time.Duration) { mgmt.now.Add(int64(d)) }
	names := make([]string, 40)
	for i := range names {
		names[i] = fmt.Sprintf("fleet-%d", i)
	}
	if sent := ask(names); sent != 41 {
		t.Fatalf("the first question sent %d reviews, want 41", sent)
	}
	// 41 s of reviews, against a DenyTTL of 10 s: every answer is still current.
	if sent := ask(names); sent != 0 {
		t.Errorf("asked again at once: %d reviews sent, want 0 (the question's answers are kept from when it was answered)", sent)
	}
	// Asked again within the DenyTTL: answered from the cache, and not kept longer for it.
	wait(8 * time.Second)
	if sent := ask(names); sent != 0 {
		t.Errorf("asked again 8 s later: %d reviews sent, want 0", sent)
	}
	wait(8 * time.Second)
	// 16 s after the question: the denials (and list on clusters) have expired; fleet-1's
	// allowance has not.
	if sent := ask(names); sent != 40 {
		t.Errorf("asked again 16 s after the question: %d reviews sent, want 40 (list and the 39 denials; reading them did not keep them)", sent)
	}
	// Past the AllowTTL, the allowance has expired too.
	wait(61 * time.Second)
	if sent := ask(names); sent != 41 {
		t.Errorf("asked again after the AllowTTL: %d reviews sent, want 41", sent)
	}

	// A fleet wider than the webhook authorizer's 8,192 answers is answered from the cache.
	mgmt.step.Store(0)
	wide := make([]string, 9000)
	for i := range wide {
		wide[i] = fmt.Sprintf("fleet-%d", i)
	}
	ask(wide)
	if sent := ask(wide); sent != 0 {
		t.Errorf("a fleet of %d asked again: %d reviews sent, want 0", len(wide), sent)
	}
}

// TestAnswersKeepTheLatestReview: a question extends only the answers it reviewed, by at most
// AllowTTL, and an answer never replaces one from a later review.
func TestAnswersKeepTheLatestReview(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	a, err := newAnswers(16, time.Minute, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	a.now = func() time.Time { return now }
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	check := func(when time.Duration, key string, wantOK, wantCached bool) {
		t.Helper()
		now = at(when)
		ok, _, cached := a.get(key)
		if cached != wantCached || cached && ok != wantOK {
			t.Errorf("at %s, %s: allowed %v cached %v; want allowed %v cached %v", when, key, ok, cached, wantOK, wantCached)
		}
	}

	// A denial reviewed at 0 by a question answered in full at 30 s is kept until 40 s.
	a.put("deny", false, at(0))
	a.restamp("deny", at(0), at(30*time.Second))
	check(39*time.Second, "deny", false, true)
	check(40*time.Second, "deny", false, false)

	// A question of 10 minutes keeps its first denial at most AllowTTL longer: until 70 s.
	a.put("long", false, at(0))
	a.restamp("long", at(0), at(10*time.Minute))
	check(69*time.Second, "long", false, true)
	check(70*time.Second, "long", false, false)

	// A later review's answer stands: neither an older put nor the older review's restamp
	// replaces or extends it.
	a.put("x", true, at(0))
	a.put("x", false, at(5*time.Second)) // the grant was removed
	a.put("x", true, at(3*time.Second))  // an older review, back late
	a.restamp("x", at(0), at(50*time.Second))
	check(14*time.Second, "x", false, true)
	check(15*time.Second, "x", false, false)
}

// TestUserKeysDoNotCollide: users whose attributes differ only in where one field ends and the
// next begins have keys of their own.
func TestUserKeysDoNotCollide(t *testing.T) {
	users := []user.Info{
		&user.DefaultInfo{Name: "a", Groups: []string{"b"}},
		&user.DefaultInfo{Name: "a\x00gb"},
		&user.DefaultInfo{Name: "a", Groups: []string{"b", "c"}},
		&user.DefaultInfo{Name: "a", Groups: []string{"b\x00gc"}},
		&user.DefaultInfo{Name: "a", UID: "b"},
		&user.DefaultInfo{Name: "a", Extra: map[string][]string{"b": {"c"}}},
		&user.DefaultInfo{Name: "a", Extra: map[string][]string{"b": {"c", "d"}}},
		&user.DefaultInfo{Name: "a", Extra: map[string][]string{"b": {"c1:d"}}},
	}
	seen := map[string]int{}
	for i, u := range users {
		k := (&access{user: u}).questionKey("get", "", "fleet-1")
		if j, dup := seen[k]; dup {
			t.Errorf("users %d and %d share the key %q", j, i, k)
		}
		seen[k] = i
	}
}
