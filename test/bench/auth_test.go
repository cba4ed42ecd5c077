package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/multicache/multicache/pkg/auth"
	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/pkg/server"
	"github.com/multicache/multicache/test/fleet"
)

// BenchmarkAuthReviewCache measures what delegated auth adds to a query, and what its review
// cache saves: the same list (the namespaces of one cluster) served by three servers over one
// registry — a static token (no review), delegated auth with the default caches (1m allowed,
// 10s denied), and delegated auth whose caches expire at once (every request sends a
// TokenReview and its SubjectAccessReviews to the management API server). The caller may read
// one named cluster, so each request asks two access questions (list every cluster: no; get
// this one: yes). Rounds interleave the three; each reports p50 and p99 of its requests.
//
//	go test -run '^$' -bench AuthReviewCache -benchtime 1x -v ./test/bench/
func BenchmarkAuthReviewCache(b *testing.B) {
	runs := envInt("MULTICACHE_BENCH_AUTH_RUNS", 5)
	requests := envInt("MULTICACHE_BENCH_AUTH_REQUESTS", 300)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	f := fleet.StartT(b, fleet.Options{Clusters: 1})
	name := f.Names()[0]
	cs, err := f.Clientset(name)
	if err != nil {
		b.Fatal(err)
	}
	c, _ := f.Cluster(name)
	// The caller: a ServiceAccount that may read this one cluster.
	if _, err := cs.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "reader"}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "bench-reader"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{auth.Group}, Resources: []string{auth.Resource}, ResourceNames: []string{name}, Verbs: []string{"get"}}}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "bench-reader"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "bench-reader"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "reader", Namespace: "default"}}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, "reader", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	token := tr.Status.Token

	reg, err := clusterset.New(clusterset.Options{Source: clusterset.Static{{Name: name, Config: c.Config(), Fingerprint: "1"}},
		Resources: []clusterset.ResourceSpec{{Name: "namespaces"}}})
	if err != nil {
		b.Fatal(err)
	}
	mk := func(opts server.Options) http.Handler {
		opts.Registry = reg
		s, err := server.New(opts)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(s.Close)
		return s.Handler()
	}
	delegated := func(ttl time.Duration) auth.Authorizer {
		a, err := auth.New(auth.Options{Client: cs, AllowTTL: ttl, DenyTTL: ttl, Metrics: prometheus.NewRegistry()})
		if err != nil {
			b.Fatal(err)
		}
		return a
	}
	servers := []struct {
		name string
		h    http.Handler
	}{
		{"static token (no review)", mk(server.Options{Tokens: []string{token}})},
		{"delegated, cached (1m / 10s)", mk(server.Options{Authorizer: delegated(0)})},
		{"delegated, no cache (every request reviewed)", mk(server.Options{Authorizer: delegated(time.Nanosecond)})},
	}
	go func() { _ = reg.Start(ctx) }()
	if missing := reg.WaitForSync(ctx, time.Minute); len(missing) > 0 {
		b.Fatalf("not synced: %v", missing)
	}
	type stat struct{ p50, p99 []time.Duration }
	stats := make([]stat, len(servers))
	for round := 0; round < runs; round++ {
		for i, s := range servers {
			ts := httptest.NewServer(s.h)
			var lat []time.Duration
			for range requests {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ts.URL+"/multicache/v1/resources/namespaces?cluster="+name, nil)
				req.Header.Set("Authorization", "Bearer "+token)
				start := time.Now()
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				lat = append(lat, time.Since(start))
				if resp.StatusCode != 200 {
					b.Fatalf("%s: %d", s.name, resp.StatusCode)
				}
			}
			ts.Close()
			sort.Slice(lat, func(a, b int) bool { return lat[a] < lat[b] })
			stats[i].p50 = append(stats[i].p50, lat[len(lat)/2])
			stats[i].p99 = append(stats[i].p99, lat[len(lat)*99/100])
		}
	}
	med := func(d []time.Duration) string {
		s := append([]time.Duration(nil), d...)
		sort.Slice(s, func(a, b int) bool { return s[a] < s[b] })
		return fmt.Sprintf("%s (%s–%s)", s[len(s)/2].Round(time.Microsecond), s[0].Round(time.Microsecond), s[len(s)-1].Round(time.Microsecond))
	}
	b.Logf("A1: one query's latency by auth mode; median (min–max) of %d rounds of %d requests each", runs, requests)
	b.Logf("| auth | p50 | p99 |")
	b.Logf("|---|---|---|")
	for i, s := range servers {
		b.Logf("| %s | %s | %s |", s.name, med(stats[i].p50), med(stats[i].p99))
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
