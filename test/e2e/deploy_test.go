package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/multicache/multicache/pkg/config"
	"github.com/multicache/multicache/test/harness"
)

const deployNamespace = "multicache-system"

// manifest is one document of a rendered YAML stream.
type manifest struct {
	Kind, Name, Namespace string
	Raw                   []byte
}

func (m manifest) String() string {
	return strings.TrimPrefix(m.Namespace+"/", "/") + m.Kind + "/" + m.Name
}

// renderedManifests splits kubectl kustomize's output into its documents.
func renderedManifests(t *testing.T, out string) []manifest {
	t.Helper()
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(out)))
	var docs []manifest
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("kubectl kustomize deploy/: reading document %d: %v", len(docs)+1, err)
		}
		if strings.TrimSpace(string(doc)) == "" {
			continue
		}
		var head struct {
			Kind     string            `json:"kind"`
			Metadata metav1.ObjectMeta `json:"metadata"`
		}
		if err := yaml.Unmarshal(doc, &head); err != nil {
			t.Fatalf("kubectl kustomize deploy/: document %d is not a Kubernetes object: %v\n%s", len(docs)+1, err, doc)
		}
		docs = append(docs, manifest{Kind: head.Kind, Name: head.Metadata.Name, Namespace: head.Metadata.Namespace, Raw: doc})
	}
}

// only returns the one document of kind, strictly decoded into T: a misspelt field fails.
func only[T any](t *testing.T, docs []manifest, kind string) (*T, manifest) {
	t.Helper()
	var found []manifest
	for _, d := range docs {
		if d.Kind == kind {
			found = append(found, d)
		}
	}
	if len(found) != 1 {
		t.Fatalf("rendered deploy/: %d objects of kind %s (%v), want exactly one", len(found), kind, found)
	}
	var obj T
	if err := yaml.UnmarshalStrict(found[0].Raw, &obj); err != nil {
		t.Fatalf("rendered %s: not a valid %s: %v", found[0], kind, err)
	}
	return &obj, found[0]
}

// TestDeployManifests renders deploy/ as kustomize does and checks what came out: every object
// the daemon needs and nothing else, a config the daemon accepts, mounts and ports that agree
// with that config, and RBAC limited to what the daemon uses. Then, against a real API server:
// the manifests pass a server-side dry run, Pod Security "restricted" admits their pod (and
// rejects a privileged variant, so the check is not vacuous), and the bindings give the
// ServiceAccount exactly the access it needs.
func TestDeployManifests(t *testing.T) {
	deployDir, err := filepath.Abs(filepath.Join("..", "..", "deploy"))
	if err != nil {
		t.Fatalf("deploy/: %v", err)
	}
	render := newKubectl(t)
	docs := renderedManifests(t, render.ok("kustomize", deployDir))

	wantKinds := []string{"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ConfigMap", "Deployment", "Service"}
	kinds := map[string]int{}
	for _, d := range docs {
		kinds[d.Kind]++
		if !slices.Contains(wantKinds, d.Kind) {
			t.Errorf("rendered deploy/: unexpected object %s (the base has only %v)", d, wantKinds)
		}
		switch d.Kind {
		case "Namespace", "ClusterRole", "ClusterRoleBinding":
		default:
			if d.Namespace != deployNamespace {
				t.Errorf("rendered %s: namespace %q, want %s", d, d.Namespace, deployNamespace)
			}
		}
	}
	for _, k := range wantKinds {
		if kinds[k] != 1 {
			t.Errorf("rendered deploy/: %d objects of kind %s, want 1", kinds[k], k)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	ns, nsDoc := only[corev1.Namespace](t, docs, "Namespace")
	cm, _ := only[corev1.ConfigMap](t, docs, "ConfigMap")
	dep, _ := only[appsv1.Deployment](t, docs, "Deployment")
	svc, _ := only[corev1.Service](t, docs, "Service")
	sa, _ := only[corev1.ServiceAccount](t, docs, "ServiceAccount")
	clusterRole, _ := only[rbacv1.ClusterRole](t, docs, "ClusterRole")
	clusterBinding, _ := only[rbacv1.ClusterRoleBinding](t, docs, "ClusterRoleBinding")
	role, _ := only[rbacv1.Role](t, docs, "Role")
	roleBinding, _ := only[rbacv1.RoleBinding](t, docs, "RoleBinding")

	t.Run("Namespace enforces Pod Security restricted", func(t *testing.T) {
		if ns.Name != deployNamespace {
			t.Errorf("Namespace %s, want %s", ns.Name, deployNamespace)
		}
		for label, want := range map[string]string{
			"pod-security.kubernetes.io/enforce":         "restricted",
			"pod-security.kubernetes.io/enforce-version": "latest",
			"pod-security.kubernetes.io/audit":           "restricted",
			"pod-security.kubernetes.io/warn":            "restricted",
		} {
			if got := ns.Labels[label]; got != want {
				t.Errorf("Namespace %s: label %s=%q, want %q", ns.Name, label, got, want)
			}
		}
	})

	cfgYAML, ok := cm.Data["config.yaml"]
	if cm.Name != "multicache-config" || !ok {
		t.Fatalf("ConfigMap %s: want multicache-config with the key config.yaml, keys %v", cm.Name, slices.Sorted(maps.Keys(cm.Data)))
	}

	t.Run("config.yaml is valid for the daemon", func(t *testing.T) {
		if _, err := config.Parse([]byte(cfgYAML)); err != nil {
			t.Errorf("ConfigMap multicache-config, config.yaml: config.Parse: %v", err)
		}
	})

	t.Run("Deployment agrees with the config, Service and ServiceAccount", func(t *testing.T) {
		// Read loosely, so that this subtest does not depend on the config package's schema.
		var cfg struct {
			Server struct {
				Listen string `json:"listen"`
				TLS    struct {
					CertFile string `json:"certFile"`
					KeyFile  string `json:"keyFile"`
				} `json:"tls"`
			} `json:"server"`
		}
		if err := yaml.Unmarshal([]byte(cfgYAML), &cfg); err != nil {
			t.Fatalf("config.yaml: %v", err)
		}
		spec := dep.Spec.Template.Spec
		if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 1 {
			t.Errorf("Deployment %s: replicas %v, want 1", dep.Name, dep.Spec.Replicas)
		}
		if spec.ServiceAccountName != sa.Name || spec.AutomountServiceAccountToken == nil || !*spec.AutomountServiceAccountToken {
			t.Errorf("Deployment %s: serviceAccountName %q (the ServiceAccount is %s), automountServiceAccountToken %v: want the ServiceAccount's token mounted",
				dep.Name, spec.ServiceAccountName, sa.Name, spec.AutomountServiceAccountToken)
		}
		if len(spec.Containers) != 1 {
			t.Fatalf("Deployment %s: %d containers, want 1", dep.Name, len(spec.Containers))
		}
		c := spec.Containers[0]
		if c.Image != "multicache:latest" {
			t.Errorf("Deployment %s: image %q, want multicache:latest from kustomization.yaml's images", dep.Name, c.Image)
		}
		for _, e := range c.Env {
			if e.Name == "GOMEMLIMIT" {
				t.Errorf("Deployment %s: sets GOMEMLIMIT; the binary takes it from the cgroup memory limit", dep.Name)
			}
		}
		if c.Resources.Limits.Memory().IsZero() {
			t.Errorf("Deployment %s: no memory limit, which the binary's soft memory limit follows", dep.Name)
		}

		// Which volume, of what source, is mounted at the directory holding file.
		mountedFrom := func(file string) (corev1.Volume, string) {
			var best corev1.VolumeMount
			for _, m := range c.VolumeMounts {
				if strings.HasPrefix(file, strings.TrimSuffix(m.MountPath, "/")+"/") && len(m.MountPath) > len(best.MountPath) {
					best = m
				}
			}
			for _, v := range spec.Volumes {
				if v.Name == best.Name && best.Name != "" {
					return v, strings.TrimPrefix(file, strings.TrimSuffix(best.MountPath, "/")+"/")
				}
			}
			return corev1.Volume{}, ""
		}
		i := slices.Index(c.Args, "--config")
		if i < 0 || i+1 >= len(c.Args) {
			t.Fatalf("Deployment %s: args %q have no --config", dep.Name, c.Args)
		}
		if v, key := mountedFrom(c.Args[i+1]); v.ConfigMap == nil || v.ConfigMap.Name != cm.Name || key != "config.yaml" {
			t.Errorf("Deployment %s: --config %s is not the key config.yaml of ConfigMap %s as mounted (volume %q, key %q)", dep.Name, c.Args[i+1], cm.Name, v.Name, key)
		}
		for _, f := range []string{cfg.Server.TLS.CertFile, cfg.Server.TLS.KeyFile} {
			if v, key := mountedFrom(f); v.Secret == nil || v.Secret.SecretName != "multicache-tls" || (key != "tls.crt" && key != "tls.key") {
				t.Errorf("Deployment %s: config.yaml's TLS file %q is not mounted from Secret multicache-tls (volume %q, key %q)", dep.Name, f, v.Name, key)
			}
		}
		if v, _ := mountedFrom("/tmp/x"); v.EmptyDir == nil {
			t.Errorf("Deployment %s: /tmp is not an emptyDir (the root filesystem is read-only)", dep.Name)
		}

		_, port, err := net.SplitHostPort(cfg.Server.Listen)
		if err != nil {
			t.Fatalf("config.yaml: server.listen %q: %v", cfg.Server.Listen, err)
		}
		if len(c.Ports) != 1 || c.Ports[0].Name != "https" || strconv.Itoa(int(c.Ports[0].ContainerPort)) != port {
			t.Errorf("Deployment %s: ports %+v, want one named https on %s (server.listen)", dep.Name, c.Ports, port)
		}
		for name, p := range map[string]*corev1.Probe{"startup": c.StartupProbe, "liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
			want := map[string]string{"startup": "/healthz", "liveness": "/healthz", "readiness": "/readyz"}[name]
			if p == nil || p.HTTPGet == nil || p.HTTPGet.Scheme != corev1.URISchemeHTTPS || p.HTTPGet.Path != want || p.HTTPGet.Port.String() != "https" {
				t.Errorf("Deployment %s: %s probe %+v, want HTTPS GET %s on port https", dep.Name, name, p, want)
			}
		}
		if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 443 || svc.Spec.Ports[0].TargetPort.String() != "https" {
			t.Errorf("Service %s: ports %+v, want 443 to the port named https", svc.Name, svc.Spec.Ports)
		}
		for k, v := range svc.Spec.Selector {
			if dep.Spec.Template.Labels[k] != v {
				t.Errorf("Service %s: selector %v does not select the Deployment's pods (labels %v)", svc.Name, svc.Spec.Selector, dep.Spec.Template.Labels)
			}
		}
	})

	t.Run("RBAC is the least the daemon needs", func(t *testing.T) {
		wantCluster := []rbacv1.PolicyRule{
			{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
			{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
		}
		wantRole := []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
		}
		if !reflect.DeepEqual(clusterRole.Rules, wantCluster) {
			t.Errorf("ClusterRole %s: rules %+v, want exactly %+v", clusterRole.Name, clusterRole.Rules, wantCluster)
		}
		if !reflect.DeepEqual(role.Rules, wantRole) {
			t.Errorf("Role %s: rules %+v, want exactly %+v", role.Name, role.Rules, wantRole)
		}
		wantSubjects := []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa.Name, Namespace: deployNamespace}}
		if clusterBinding.RoleRef.Kind != "ClusterRole" || clusterBinding.RoleRef.Name != clusterRole.Name || !reflect.DeepEqual(clusterBinding.Subjects, wantSubjects) {
			t.Errorf("ClusterRoleBinding %s: roleRef %+v, subjects %+v: want ClusterRole %s bound to %+v", clusterBinding.Name, clusterBinding.RoleRef, clusterBinding.Subjects, clusterRole.Name, wantSubjects)
		}
		if roleBinding.RoleRef.Kind != "Role" || roleBinding.RoleRef.Name != role.Name || !reflect.DeepEqual(roleBinding.Subjects, wantSubjects) {
			t.Errorf("RoleBinding %s: roleRef %+v, subjects %+v: want Role %s bound to %+v", roleBinding.Name, roleBinding.RoleRef, roleBinding.Subjects, role.Name, wantSubjects)
		}
	})

	// Against a real API server (PodSecurity admission is on by default).
	env := harness.Start(t, harness.Options{Clusters: 1, Timeout: 5 * time.Minute})
	ctx, f := env.Ctx, env.Fleet
	cluster := f.Clusters[0]
	cs, err := f.Clientset(cluster.Name)
	if err != nil {
		t.Fatalf("clientset for %s: %v", cluster.Name, err)
	}
	k := newKubectl(t, "--kubeconfig", f.AdminKubeconfig(), "--context", cluster.Name)

	nsFile := filepath.Join(t.TempDir(), "namespace.yaml")
	if err := os.WriteFile(nsFile, nsDoc.Raw, 0o600); err != nil {
		t.Fatalf("writing the Namespace document: %v", err)
	}
	k.ok("apply", "-f", nsFile)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// Without a controller-manager the namespace stays Terminating; the fleet goes next.
		if err := cs.CoreV1().Namespaces().Delete(ctx, deployNamespace, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("cleanup: deleting Namespace %s: %v", deployNamespace, err)
		}
	})
	live, err := cs.CoreV1().Namespaces().Get(ctx, deployNamespace, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("Namespace %s after kubectl apply: %v", deployNamespace, err)
	}
	if live.Labels["pod-security.kubernetes.io/enforce"] != "restricted" {
		t.Fatalf("Namespace %s as applied: labels %v, no Pod Security enforcement", deployNamespace, live.Labels)
	}

	t.Run("kubectl apply --dry-run=server -k deploy/", func(t *testing.T) {
		out, errs, ok := k.run("apply", "--dry-run=server", "-k", deployDir)
		if !ok {
			t.Fatalf("kubectl apply --dry-run=server -k deploy/: %s", errs)
		}
		lines := strings.Split(out, "\n")
		for _, d := range docs {
			// "deployment.apps/multicache created (server dry run)"
			kind := strings.ToLower(d.Kind)
			if !slices.ContainsFunc(lines, func(l string) bool {
				return (strings.HasPrefix(l, kind+"/") || strings.HasPrefix(l, kind+".")) && strings.Contains(l, "/"+d.Name+" ")
			}) {
				t.Errorf("kubectl apply --dry-run=server -k deploy/: %s not in the output:\n%s", d, out)
			}
		}
		// The Deployment's pod template is checked against the namespace's warn level here.
		if strings.Contains(errs, "PodSecurity") {
			t.Errorf("kubectl apply --dry-run=server -k deploy/: Pod Security warnings:\n%s", errs)
		}
	})

	t.Run("Pod Security restricted admits the pod and rejects a privileged one", func(t *testing.T) {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: dep.Name + "-pod-security", Namespace: deployNamespace, Labels: dep.Spec.Template.Labels},
			Spec:       *dep.Spec.Template.Spec.DeepCopy(),
		}
		dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
		if _, err := cs.CoreV1().Pods(deployNamespace).Create(ctx, pod, dry); err != nil {
			t.Errorf("dry-run create of the Deployment's pod in %s (Pod Security restricted): %v", deployNamespace, err)
		}
		bad := pod.DeepCopy()
		bad.Spec.Containers[0].SecurityContext.AllowPrivilegeEscalation = ptr(true)
		_, err := cs.CoreV1().Pods(deployNamespace).Create(ctx, bad, dry)
		if err == nil || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "violates PodSecurity") || !strings.Contains(err.Error(), "allowPrivilegeEscalation") {
			t.Errorf("dry-run create of the pod with allowPrivilegeEscalation: true: %v; want Forbidden by PodSecurity (is enforcement on?)", err)
		}
	})

	t.Run("the ServiceAccount has the access it needs and no more", func(t *testing.T) {
		rbac := cs.RbacV1()
		if _, err := rbac.ClusterRoles().Create(ctx, clusterRole, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating ClusterRole %s: %v", clusterRole.Name, err)
		}
		t.Cleanup(func() {
			deleteQuietly(t, "ClusterRole "+clusterRole.Name, rbac.ClusterRoles().Delete, clusterRole.Name)
		})
		if _, err := rbac.ClusterRoleBindings().Create(ctx, clusterBinding, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating ClusterRoleBinding %s: %v", clusterBinding.Name, err)
		}
		t.Cleanup(func() {
			deleteQuietly(t, "ClusterRoleBinding "+clusterBinding.Name, rbac.ClusterRoleBindings().Delete, clusterBinding.Name)
		})
		if _, err := rbac.Roles(deployNamespace).Create(ctx, role, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating Role %s: %v", role.Name, err)
		}
		if _, err := rbac.RoleBindings(deployNamespace).Create(ctx, roleBinding, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating RoleBinding %s: %v", roleBinding.Name, err)
		}

		user := "system:serviceaccount:" + deployNamespace + ":" + sa.Name
		groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + deployNamespace, "system:authenticated"}
		allowed := func(a authorizationv1.ResourceAttributes) (bool, error) {
			sar, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
				Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: groups, ResourceAttributes: &a}}, metav1.CreateOptions{})
			if err != nil {
				return false, err
			}
			return sar.Status.Allowed, nil
		}
		type check struct {
			a    authorizationv1.ResourceAttributes
			want bool
		}
		var checks []check
		for _, v := range []string{"get", "list", "watch"} {
			checks = append(checks, check{authorizationv1.ResourceAttributes{Namespace: deployNamespace, Verb: v, Resource: "secrets"}, true})
		}
		for _, v := range []string{"get", "list", "watch", "create", "update", "patch", "delete"} {
			checks = append(checks, check{authorizationv1.ResourceAttributes{Namespace: deployNamespace, Verb: v, Group: "coordination.k8s.io", Resource: "leases"}, true})
		}
		checks = append(checks,
			check{authorizationv1.ResourceAttributes{Verb: "create", Group: "authentication.k8s.io", Resource: "tokenreviews"}, true},
			check{authorizationv1.ResourceAttributes{Verb: "create", Group: "authorization.k8s.io", Resource: "subjectaccessreviews"}, true},
			check{authorizationv1.ResourceAttributes{Namespace: deployNamespace, Verb: "create", Resource: "secrets"}, false},
			check{authorizationv1.ResourceAttributes{Namespace: deployNamespace, Verb: "update", Resource: "secrets"}, false},
			check{authorizationv1.ResourceAttributes{Namespace: "default", Verb: "get", Resource: "secrets"}, false},
			check{authorizationv1.ResourceAttributes{Verb: "list", Resource: "secrets"}, false}, // every namespace
			check{authorizationv1.ResourceAttributes{Namespace: "kube-system", Verb: "update", Group: "coordination.k8s.io", Resource: "leases"}, false},
			check{authorizationv1.ResourceAttributes{Namespace: deployNamespace, Verb: "list", Resource: "pods"}, false},
			check{authorizationv1.ResourceAttributes{Namespace: deployNamespace, Verb: "get", Resource: "configmaps"}, false},
			check{authorizationv1.ResourceAttributes{Verb: "list", Resource: "nodes"}, false},
			check{authorizationv1.ResourceAttributes{Verb: "get", Group: "multicache.io", Resource: "clusters", Name: "prod-eu"}, false},
		)
		describe := func(a authorizationv1.ResourceAttributes) string {
			s := a.Verb + " " + strings.TrimSuffix(a.Resource+"."+a.Group, ".")
			if a.Name != "" {
				s += "/" + a.Name
			}
			if a.Namespace != "" {
				return s + " in " + a.Namespace
			}
			return s + " cluster-wide"
		}
		// The authorizer sees new bindings through its informers: wait for the first grant.
		harness.WaitFor(t, "RBAC for "+user+" in effect", 30*time.Second, func() bool {
			ok, err := allowed(checks[0].a)
			return err == nil && ok
		})
		for _, c := range checks {
			got, err := allowed(c.a)
			if err != nil {
				t.Fatalf("SubjectAccessReview %s for %s: %v", describe(c.a), user, err)
			}
			if got != c.want {
				t.Errorf("%s may %s: %t, want %t", user, describe(c.a), got, c.want)
			}
		}
		// Whoever may write a Lease in the sharding namespace can claim to be a replica: the
		// manifests grant those writes to the daemon's ServiceAccount alone.
		other := "system:serviceaccount:" + deployNamespace + ":default"
		for _, v := range []string{"create", "update", "patch", "delete"} {
			a := authorizationv1.ResourceAttributes{Namespace: deployNamespace, Verb: v, Group: "coordination.k8s.io", Resource: "leases"}
			sar, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
				Spec: authorizationv1.SubjectAccessReviewSpec{User: other, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + deployNamespace, "system:authenticated"}, ResourceAttributes: &a}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("SubjectAccessReview %s for %s: %v", describe(a), other, err)
			}
			if sar.Status.Allowed {
				t.Errorf("%s may %s: only the daemon's ServiceAccount may write the sharding namespace's Leases", other, describe(a))
			}
		}
	})

	t.Run("the example reader roles apply", func(t *testing.T) {
		example := filepath.Join(deployDir, "examples", "cluster-reader.yaml")
		out := k.ok("apply", "--dry-run=server", "-f", example)
		for _, name := range []string{"multicache-read-prod", "multicache-read-all"} {
			if !strings.Contains(out, "clusterrole.rbac.authorization.k8s.io/"+name+" ") {
				t.Errorf("kubectl apply --dry-run=server -f %s: no ClusterRole %s in the output:\n%s", "deploy/examples/cluster-reader.yaml", name, out)
			}
		}
	})
}

// deleteQuietly deletes a cluster-scoped object in a cleanup, with its own deadline.
func deleteQuietly(t *testing.T, what string, del func(context.Context, string, metav1.DeleteOptions) error, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := del(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("cleanup: deleting %s: %v", what, err)
	}
}

// TestDeployShardedOverlay renders deploy/sharded/: the base's objects, with the Deployment at
// three replicas, each a sharded replica named after its Pod, advertising its Pod IP over
// https, with a peer certificate of its own from cert-manager's CSI driver (named after the Pod,
// for server and client use). The config and those flags make a configuration the daemon
// accepts (sharding with delegated auth needs the peer certificate), and the overlay passes a
// server-side dry run under Pod Security restricted.
func TestDeployShardedOverlay(t *testing.T) {
	dir, err := filepath.Abs(filepath.Join("..", "..", "deploy", "sharded"))
	if err != nil {
		t.Fatal(err)
	}
	render := newKubectl(t)
	docs := renderedManifests(t, render.ok("kustomize", dir))
	dep, _ := only[appsv1.Deployment](t, docs, "Deployment")
	cm, _ := only[corev1.ConfigMap](t, docs, "ConfigMap")
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 3 {
		t.Errorf("replicas %v, want 3", dep.Spec.Replicas)
	}
	// A replica stopping waits up to a lease duration (15 s) for its clusters to stop, writes
	// their fences, waits up to 90 s while their next owners take their states, and drains its
	// HTTP server (10 s): the kubelet must not kill it sooner.
	if g := dep.Spec.Template.Spec.TerminationGracePeriodSeconds; g == nil || *g < 135 {
		t.Errorf("terminationGracePeriodSeconds %v: want at least 135 s (a lease duration, the handover wait, the drain, and the fence writes)", g)
	}
	c := dep.Spec.Template.Spec.Containers[0]
	flags := map[string]string{}
	for _, a := range c.Args[1:] {
		k, v, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		flags[k] = v
	}
	want := map[string]string{"config": "/etc/multicache/config.yaml", "sharding": "", "replica-id": "$(POD_NAME)", "advertise-url": "https://$(POD_IP):8443",
		"peer-cert-file": "/etc/multicache/peer/tls.crt", "peer-key-file": "/etc/multicache/peer/tls.key", "peer-ca-file": "/etc/multicache/peer/ca.crt"}
	if !maps.Equal(flags, want) {
		t.Errorf("args %v, want %v", c.Args, want)
	}
	env := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			env[e.Name] = e.ValueFrom.FieldRef.FieldPath
		}
	}
	if env["POD_NAME"] != "metadata.name" || env["POD_IP"] != "status.podIP" {
		t.Errorf("env %v: POD_NAME and POD_IP from the downward API", env)
	}
	var peer *corev1.Volume
	for i, v := range dep.Spec.Template.Spec.Volumes {
		if v.Name == "peer" {
			peer = &dep.Spec.Template.Spec.Volumes[i]
		}
	}
	mounted := slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "peer" && m.MountPath == "/etc/multicache/peer" })
	switch {
	case peer == nil || peer.CSI == nil || peer.CSI.Driver != "csi.cert-manager.io" || !mounted:
		t.Errorf("no peer volume from csi.cert-manager.io mounted at /etc/multicache/peer: %+v", peer)
	default:
		a := peer.CSI.VolumeAttributes
		if a["csi.cert-manager.io/dns-names"] != "${POD_NAME}" || !strings.Contains(a["csi.cert-manager.io/key-usages"], "server auth") || !strings.Contains(a["csi.cert-manager.io/key-usages"], "client auth") {
			t.Errorf("peer certificate attributes %v: it must name the Pod and serve both ways", a)
		}
	}
	cfg, err := config.Parse([]byte(cm.Data["config.yaml"]))
	if err != nil {
		t.Fatalf("config.yaml: %v", err)
	}
	cfg.Sharding = &config.Sharding{Enabled: true, AdvertiseURL: "https://10.0.0.5:8443", Identity: "multicache-abc"}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "sharding.peerCertFile") {
		t.Errorf("the overlay's config sharded without a peer certificate: %v, want a refusal", err)
	}
	cfg.Sharding.PeerCertFile, cfg.Sharding.PeerKeyFile, cfg.Sharding.PeerCAFile = want["peer-cert-file"], want["peer-key-file"], want["peer-ca-file"]
	if err := cfg.Validate(); err != nil {
		t.Errorf("the overlay's config and flags: %v", err)
	}

	env2 := harness.Start(t, harness.Options{Clusters: 1})
	k := newKubectl(t, "--kubeconfig", env2.Fleet.Kubeconfig(), "--context", env2.Fleet.Names()[0])
	k.ok("apply", "--server-side", "-f", filepath.Join(dir, "..", "base", "namespace.yaml"))
	if out, errs, ok := k.run("apply", "--dry-run=server", "-k", dir); !ok || strings.Contains(errs, "PodSecurity") {
		t.Errorf("kubectl apply --dry-run=server -k deploy/sharded/: %s\n%s", out, errs)
	}
}

// TestDeployProfilesOverlay renders deploy/profiles/, the fleet from ClusterProfiles, and checks
// it without a cluster: the config names the inventory namespace and the provider file, and
// reads no Secrets; the rest of the config is the base's; the ServiceAccount may get, list and
// watch ClusterProfiles in the inventory namespace and nothing else there, and no longer reads
// Secrets; the provider file is a ConfigMap mounted at the directory providerFile names. Then
// deploy/crds/clusterprofiles.yaml: the ClusterProfile CRD (multicluster.x-k8s.io/v1alpha1,
// namespaced, with a status subresource and access providers' connection details) as the API
// server's own validation of CRDs accepts it.
func TestDeployProfilesOverlay(t *testing.T) {
	deployDir, err := filepath.Abs(filepath.Join("..", "..", "deploy"))
	if err != nil {
		t.Fatal(err)
	}
	docs := renderedManifests(t, newKubectl(t).ok("kustomize", filepath.Join(deployDir, "profiles")))

	cm := named[corev1.ConfigMap](t, docs, "ConfigMap", deployNamespace, "multicache-config")
	// Read generically: the config package's schema is not what is tested here.
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(cm.Data["config.yaml"]), &cfg); err != nil {
		t.Fatalf("ConfigMap %s, config.yaml: %v", cm.Name, err)
	}
	profiles, _ := lookup(cfg, "clusters", "clusterProfiles").(map[string]any)
	inventory, _ := profiles["namespace"].(string)
	providerFile, _ := profiles["providerFile"].(string)
	if inventory == "" || providerFile == "" || !path.IsAbs(providerFile) {
		t.Fatalf("config.yaml: clusters.clusterProfiles %v: want a namespace and an absolute providerFile", profiles)
	}
	if inventory == deployNamespace {
		t.Fatalf("config.yaml: clusters.clusterProfiles.namespace is the daemon's own namespace, %s; the overlay's RBAC is for an inventory of its own", inventory)
	}

	t.Run("the rendered objects", func(t *testing.T) {
		want := map[string]int{"Namespace": 1, "ServiceAccount": 1, "ClusterRole": 1, "ClusterRoleBinding": 1, "Role": 2, "RoleBinding": 2, "ConfigMap": 2, "Deployment": 1, "Service": 1}
		got := map[string]int{}
		for _, d := range docs {
			got[d.Kind]++
			switch {
			case d.Kind == "Namespace" || d.Kind == "ClusterRole" || d.Kind == "ClusterRoleBinding":
			case d.Namespace == inventory && (d.Kind == "Role" || d.Kind == "RoleBinding"):
			case d.Namespace != deployNamespace:
				t.Errorf("rendered %s: namespace %q, want %s (or the inventory, %s, for a Role and its RoleBinding)", d, d.Namespace, deployNamespace, inventory)
			}
		}
		if !maps.Equal(got, want) {
			t.Errorf("rendered deploy/profiles/: objects by kind %v, want %v", got, want)
		}
	})

	t.Run("config.yaml reads ClusterProfiles instead of Secrets, and is otherwise the base's", func(t *testing.T) {
		if s, ok := lookup(cfg, "sources").(map[string]any); ok && s["secrets"] != nil {
			t.Errorf("config.yaml: sources.secrets %v is still set", s["secrets"])
		}
		baseCM := &corev1.ConfigMap{}
		if b, err := os.ReadFile(filepath.Join(deployDir, "base", "configmap.yaml")); err != nil {
			t.Fatal(err)
		} else if err := yaml.UnmarshalStrict(b, baseCM); err != nil {
			t.Fatalf("deploy/base/configmap.yaml: %v", err)
		}
		var base map[string]any
		if err := yaml.Unmarshal([]byte(baseCM.Data["config.yaml"]), &base); err != nil {
			t.Fatalf("deploy/base/configmap.yaml, config.yaml: %v", err)
		}
		rest := maps.Clone(cfg)
		delete(rest, "clusters")
		delete(rest, "sources")
		delete(base, "sources")
		if !reflect.DeepEqual(rest, base) {
			t.Errorf("config.yaml without clusters and sources:\n%v\nthe base's without sources:\n%v", rest, base)
		}
	})

	t.Run("RBAC reads ClusterProfiles in the inventory, and nothing more", func(t *testing.T) {
		sa, _ := only[corev1.ServiceAccount](t, docs, "ServiceAccount")
		wantSubjects := []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa.Name, Namespace: deployNamespace}}
		var roles, bindings []manifest
		for _, d := range docs {
			if d.Namespace == inventory && d.Kind == "Role" {
				roles = append(roles, d)
			}
			if d.Namespace == inventory && d.Kind == "RoleBinding" {
				bindings = append(bindings, d)
			}
		}
		if len(roles) != 1 || len(bindings) != 1 {
			t.Fatalf("in the inventory namespace %s: Roles %v, RoleBindings %v, want one of each", inventory, roles, bindings)
		}
		role := named[rbacv1.Role](t, docs, "Role", inventory, roles[0].Name)
		binding := named[rbacv1.RoleBinding](t, docs, "RoleBinding", inventory, bindings[0].Name)
		wantRules := []rbacv1.PolicyRule{{APIGroups: []string{"multicluster.x-k8s.io"}, Resources: []string{"clusterprofiles"}, Verbs: []string{"get", "list", "watch"}}}
		if !reflect.DeepEqual(role.Rules, wantRules) {
			t.Errorf("Role %s/%s: rules %+v, want exactly %+v", inventory, role.Name, role.Rules, wantRules)
		}
		wantRef := rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role.Name}
		if binding.RoleRef != wantRef || !reflect.DeepEqual(binding.Subjects, wantSubjects) {
			t.Errorf("RoleBinding %s/%s: roleRef %+v, subjects %+v: want %+v bound to %+v", inventory, binding.Name, binding.RoleRef, binding.Subjects, wantRef, wantSubjects)
		}

		// In its own namespace the daemon keeps the Leases it shards with and reads no Secrets.
		own := named[rbacv1.Role](t, docs, "Role", deployNamespace, "multicache")
		wantOwn := []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}}}
		if !reflect.DeepEqual(own.Rules, wantOwn) {
			t.Errorf("Role %s/%s: rules %+v, want exactly %+v", deployNamespace, own.Name, own.Rules, wantOwn)
		}
		clusterRole, _ := only[rbacv1.ClusterRole](t, docs, "ClusterRole")
		for _, r := range clusterRole.Rules {
			if slices.Contains(r.APIGroups, "multicluster.x-k8s.io") || slices.Contains(r.APIGroups, "*") || slices.Contains(r.Resources, "*") {
				t.Errorf("ClusterRole %s: rule %+v reaches beyond the inventory namespace", clusterRole.Name, r)
			}
		}
	})

	t.Run("the provider file is mounted where providerFile says", func(t *testing.T) {
		dep, _ := only[appsv1.Deployment](t, docs, "Deployment")
		spec := dep.Spec.Template.Spec
		c := spec.Containers[0]
		// The mount that holds the file: the deepest whose path is a directory above it.
		var mount corev1.VolumeMount
		for _, m := range c.VolumeMounts {
			if strings.HasPrefix(providerFile, strings.TrimSuffix(m.MountPath, "/")+"/") && len(m.MountPath) > len(mount.MountPath) {
				mount = m
			}
		}
		if mount.MountPath != path.Dir(providerFile) {
			t.Fatalf("Deployment %s: providerFile %s is under the mount %q, want a mount at %s", dep.Name, providerFile, mount.MountPath, path.Dir(providerFile))
		}
		i := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == mount.Name })
		if i < 0 || spec.Volumes[i].ConfigMap == nil || spec.Volumes[i].ConfigMap.Name != "multicache-cluster-profile-providers" {
			t.Fatalf("Deployment %s: the volume %q mounted at %s is not the ConfigMap multicache-cluster-profile-providers", dep.Name, mount.Name, mount.MountPath)
		}
		key := path.Base(providerFile)
		for _, it := range spec.Volumes[i].ConfigMap.Items {
			if it.Path == key {
				key = it.Key
			}
		}
		providers := named[corev1.ConfigMap](t, docs, "ConfigMap", deployNamespace, "multicache-cluster-profile-providers")
		raw, ok := providers.Data[key]
		if !ok {
			t.Fatalf("ConfigMap %s: no key %s for providerFile %s (keys %v)", providers.Name, key, providerFile, slices.Sorted(maps.Keys(providers.Data)))
		}
		// The reference consumers' format: {"providers": [{"name", "execConfig"}]}.
		var file struct {
			Providers []struct {
				Name       string `json:"name"`
				ExecConfig *struct {
					APIVersion string `json:"apiVersion"`
					Command    string `json:"command"`
				} `json:"execConfig"`
			} `json:"providers"`
		}
		if err := json.Unmarshal([]byte(raw), &file); err != nil {
			t.Fatalf("ConfigMap %s, %s: %v", providers.Name, key, err)
		}
		if len(file.Providers) == 0 {
			t.Errorf("ConfigMap %s, %s: no providers", providers.Name, key)
		}
		for j, p := range file.Providers {
			if p.Name == "" || p.ExecConfig == nil || p.ExecConfig.Command == "" || p.ExecConfig.APIVersion != "client.authentication.k8s.io/v1" {
				t.Errorf("ConfigMap %s, %s: providers[%d] %+v: want a name and an execConfig with a command, client.authentication.k8s.io/v1", providers.Name, key, j, p)
			}
		}
	})

	t.Run("the ClusterProfile CRD", func(t *testing.T) {
		b, err := os.ReadFile(filepath.Join(deployDir, "crds", "clusterprofiles.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(b, crd); err != nil {
			t.Fatalf("deploy/crds/clusterprofiles.yaml: not a CustomResourceDefinition: %v", err)
		}
		if crd.APIVersion != "apiextensions.k8s.io/v1" || crd.Kind != "CustomResourceDefinition" || crd.Name != "clusterprofiles.multicluster.x-k8s.io" {
			t.Errorf("%s %s: want the apiextensions.k8s.io/v1 CustomResourceDefinition clusterprofiles.multicluster.x-k8s.io", crd.APIVersion+"/"+crd.Kind, crd.Name)
		}
		s := crd.Spec
		if s.Group != "multicluster.x-k8s.io" || s.Scope != apiextensionsv1.NamespaceScoped || s.Names.Plural != "clusterprofiles" || s.Names.Kind != "ClusterProfile" {
			t.Errorf("group %q, scope %q, names %+v: want multicluster.x-k8s.io, Namespaced, clusterprofiles of kind ClusterProfile", s.Group, s.Scope, s.Names)
		}
		if len(s.Versions) != 1 {
			t.Fatalf("versions %d, want one (v1alpha1)", len(s.Versions))
		}
		v := s.Versions[0]
		if v.Name != "v1alpha1" || !v.Served || !v.Storage {
			t.Errorf("version %s: served %t, storage %t: want v1alpha1, served and stored", v.Name, v.Served, v.Storage)
		}
		if v.Subresources == nil || v.Subresources.Status == nil {
			t.Errorf("version %s: no status subresource", v.Name)
		}
		if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
			t.Fatalf("version %s: no schema", v.Name)
		}
		root := v.Schema.OpenAPIV3Schema
		for _, list := range []string{"accessProviders", "credentialProviders"} {
			cluster := schemaAt(root, "status", list, "[]", "cluster")
			if server := schemaAt(cluster, "server"); server == nil || server.Type != "string" {
				t.Errorf("status.%s[].cluster.server: missing or not a string", list)
			}
			if ca := schemaAt(cluster, "certificate-authority-data"); ca == nil || ca.Type != "string" || ca.Format != "byte" {
				t.Errorf("status.%s[].cluster.certificate-authority-data: missing or not a string of format byte", list)
			}
			if ext := schemaAt(cluster, "extensions", "[]", "extension"); ext == nil || ext.XPreserveUnknownFields == nil || !*ext.XPreserveUnknownFields {
				t.Errorf("status.%s[].cluster.extensions[].extension: missing or does not keep unknown fields", list)
			}
		}
		if m := schemaAt(root, "spec", "clusterManager"); m == nil || !slices.Contains(schemaAt(root, "spec").Required, "clusterManager") ||
			!slices.ContainsFunc(m.XValidations, func(r apiextensionsv1.ValidationRule) bool { return r.Rule == "self == oldSelf" }) {
			t.Errorf("spec.clusterManager: missing, optional or mutable; want it required and immutable (self == oldSelf)")
		}

		// What the API server checks when the CRD is created: a structural schema, CEL rules
		// that compile, list-map keys that are required, printer columns that parse.
		v1crd := crd.DeepCopy()
		apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(v1crd)
		var internal apiextensions.CustomResourceDefinition
		if err := apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(v1crd, &internal, nil); err != nil {
			t.Fatalf("converting the CRD: %v", err)
		}
		for _, e := range apiextensionsvalidation.ValidateCustomResourceDefinition(context.Background(), &internal) {
			t.Errorf("deploy/crds/clusterprofiles.yaml: %v", e)
		}
	})
}

// named returns the document of kind, namespace and name, strictly decoded into T.
func named[T any](t *testing.T, docs []manifest, kind, namespace, name string) *T {
	t.Helper()
	i := slices.IndexFunc(docs, func(d manifest) bool { return d.Kind == kind && d.Namespace == namespace && d.Name == name })
	if i < 0 {
		t.Fatalf("rendered: no %s %s/%s", kind, namespace, name)
	}
	var obj T
	if err := yaml.UnmarshalStrict(docs[i].Raw, &obj); err != nil {
		t.Fatalf("rendered %s: not a valid %s: %v", docs[i], kind, err)
	}
	return &obj
}

// lookup walks nested maps by key; nil when a key is missing.
func lookup(m map[string]any, keys ...string) any {
	var v any = m
	for _, k := range keys {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[k]
	}
	return v
}

// schemaAt walks a CRD schema by property names, "[]" standing for a list's items; nil when a
// step is missing.
func schemaAt(s *apiextensionsv1.JSONSchemaProps, steps ...string) *apiextensionsv1.JSONSchemaProps {
	for _, step := range steps {
		if s == nil {
			return nil
		}
		if step == "[]" {
			if s.Items == nil {
				return nil
			}
			s = s.Items.Schema
			continue
		}
		p, ok := s.Properties[step]
		if !ok {
			return nil
		}
		s = &p
	}
	return s
}
