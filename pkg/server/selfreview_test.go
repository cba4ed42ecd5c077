package server

import (
	"context"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// TestSelfAccessReview: client-go's own typed client asks what its caller may do, in the fleet
// view and in one cluster's, and gets what a request would get: reads of cached resources in
// clusters the caller may read; nothing else, with the reason.
func TestSelfAccessReview(t *testing.T) {
	hs, _ := kubeFixtureWith(t, Options{Authorizer: tokenAccess{"ta": {"a"}, "none": {"zzz"}, "all": {"*"}}})
	client := func(token, cluster string) kubernetes.Interface {
		host := hs.URL
		if cluster != "" {
			host += "/clusters/" + cluster
		}
		c, err := kubernetes.NewForConfig(&rest.Config{Host: host, BearerToken: token})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	for _, tc := range []struct {
		token, cluster string
		attrs          authorizationv1.ResourceAttributes
		allowed        bool
		reason         string
	}{
		{"ta", "", authorizationv1.ResourceAttributes{Verb: "list", Resource: "pods"}, true, "1 of the 2 clusters"},
		{"ta", "", authorizationv1.ResourceAttributes{Verb: "watch", Resource: "pods", Namespace: "ns"}, true, ""},
		{"ta", "a", authorizationv1.ResourceAttributes{Verb: "get", Resource: "pods", Namespace: "ns", Name: "only-a"}, true, ""},
		{"ta", "b", authorizationv1.ResourceAttributes{Verb: "list", Resource: "pods"}, false, `may not read cluster "b"`},
		{"ta", "", authorizationv1.ResourceAttributes{Verb: "create", Resource: "pods"}, false, "reads only"},
		{"ta", "", authorizationv1.ResourceAttributes{Verb: "delete", Resource: "pods"}, false, "reads only"},
		{"ta", "", authorizationv1.ResourceAttributes{Verb: "get", Resource: "pods", Subresource: "log"}, false, "subresource"},
		{"ta", "", authorizationv1.ResourceAttributes{Verb: "list", Group: "apps", Resource: "deployments"}, false, "not cached"},
		{"ta", "", authorizationv1.ResourceAttributes{Verb: "list", Group: "multicache.io", Resource: "clusters"}, true, ""},
		{"ta", "", authorizationv1.ResourceAttributes{Verb: "watch", Group: "multicache.io", Resource: "clusters"}, false, "cannot be watch"},
		{"none", "", authorizationv1.ResourceAttributes{Verb: "list", Resource: "pods"}, false, "may not read any cluster"},
		{"all", "b", authorizationv1.ResourceAttributes{Verb: "list", Resource: "pods"}, true, "every cluster"},
	} {
		rev, err := client(tc.token, tc.cluster).AuthorizationV1().SelfSubjectAccessReviews().Create(context.Background(),
			&authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &tc.attrs}}, metav1.CreateOptions{})
		what := tc.token + " in " + tc.cluster + ": " + tc.attrs.Verb + " " + tc.attrs.Resource
		if err != nil {
			t.Errorf("%s: %v", what, err)
			continue
		}
		if rev.Status.Allowed != tc.allowed || rev.Status.Denied == tc.allowed || !strings.Contains(rev.Status.Reason, tc.reason) {
			t.Errorf("%s: allowed %v denied %v (%q), want allowed %v, a reason with %q", what, rev.Status.Allowed, rev.Status.Denied, rev.Status.Reason, tc.allowed, tc.reason)
		}
		if rev.Spec.ResourceAttributes == nil || *rev.Spec.ResourceAttributes != tc.attrs {
			t.Errorf("%s: the answer's spec %+v is not the question's", what, rev.Spec)
		}
	}
	for path, want := range map[string]bool{"/healthz": true, "/apis/apps/v1": true, "/version": true, "/logs": false} {
		rev, err := client("ta", "").AuthorizationV1().SelfSubjectAccessReviews().Create(context.Background(),
			&authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{NonResourceAttributes: &authorizationv1.NonResourceAttributes{Verb: "get", Path: path}}}, metav1.CreateOptions{})
		if err != nil || rev.Status.Allowed != want {
			t.Errorf("get %s: %+v %v, want allowed %v", path, rev, err, want)
		}
	}
	// Unauthenticated: 401, as for any read. Unknown cluster: 404. No attributes: 400.
	_, err := client("nobody", "").AuthorizationV1().SelfSubjectAccessReviews().Create(context.Background(),
		&authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "list", Resource: "pods"}}}, metav1.CreateOptions{})
	if !apierrors.IsUnauthorized(err) {
		t.Errorf("unknown token: %v, want 401", err)
	}
	_, err = client("ta", "zzz").AuthorizationV1().SelfSubjectAccessReviews().Create(context.Background(),
		&authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "list", Resource: "pods"}}}, metav1.CreateOptions{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("a cluster not in the fleet: %v, want 404", err)
	}
	_, err = client("ta", "").AuthorizationV1().SelfSubjectAccessReviews().Create(context.Background(), &authorizationv1.SelfSubjectAccessReview{}, metav1.CreateOptions{})
	if !apierrors.IsBadRequest(err) {
		t.Errorf("a review without attributes: %v, want 400", err)
	}

	// Rules: pods, clusters and definitions, read verbs only; for a caller who reads no cluster, none of pods.
	rules, err := client("ta", "").AuthorizationV1().SelfSubjectRulesReviews().Create(context.Background(),
		&authorizationv1.SelfSubjectRulesReview{Spec: authorizationv1.SelfSubjectRulesReviewSpec{Namespace: "ns"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range rules.Status.ResourceRules {
		got[r.APIGroups[0]] = strings.Join(r.Resources, ",") + ":" + strings.Join(r.Verbs, ",")
	}
	if got[""] != "pods:get,list,watch" || got["multicache.io"] != "clusters:get,list" || got["apiextensions.k8s.io"] != "customresourcedefinitions:get,list,watch" || len(got) != 3 {
		t.Errorf("rules of ta: %v", got)
	}
	rules, err = client("none", "").AuthorizationV1().SelfSubjectRulesReviews().Create(context.Background(),
		&authorizationv1.SelfSubjectRulesReview{Spec: authorizationv1.SelfSubjectRulesReviewSpec{Namespace: "ns"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rules.Status.ResourceRules {
		if strings.Contains(strings.Join(r.Resources, ","), "pods") {
			t.Errorf("a caller who reads no cluster has a rule for pods: %+v", r)
		}
	}
}

// TestSelfReview: kubectl auth whoami's question: the caller as the authorizer knows it; with
// auth off, anonymous.
func TestSelfReview(t *testing.T) {
	for token, want := range map[string]string{"secret": "multicache:token-holder", "": "system:anonymous"} {
		var opts Options
		if token != "" {
			opts.Tokens = []string{token}
		}
		hs, _ := kubeFixtureWith(t, opts)
		c, err := kubernetes.NewForConfig(&rest.Config{Host: hs.URL + "/clusters/a", BearerToken: token})
		if err != nil {
			t.Fatal(err)
		}
		rev, err := c.AuthenticationV1().SelfSubjectReviews().Create(context.Background(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil || rev.Status.UserInfo.Username != want || len(rev.Status.UserInfo.Groups) == 0 {
			t.Errorf("token %q: %+v %v, want %s with its groups", token, rev, err, want)
		}
	}
}
