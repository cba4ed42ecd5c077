package harness

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/multicache/multicache/pkg/sources"
	"github.com/multicache/multicache/test/fleet"
)

// InventoryNamespace is where the tests' ClusterProfiles live.
const InventoryNamespace = "fleet-inventory"

// Inventory is a ClusterProfile inventory in a management cluster, written as a cluster
// manager writes it: the profile, then its status through the status subresource.
type Inventory struct {
	T      testing.TB
	Ctx    context.Context
	Client dynamic.ResourceInterface
}

// InstallInventory installs the shipped ClusterProfile CRD (deploy/crds/clusterprofiles.yaml)
// in the cluster cfg reaches, waits for it, and creates InventoryNamespace.
func InstallInventory(ctx context.Context, t testing.TB, cfg *rest.Config) *Inventory {
	t.Helper()
	_, here, _, _ := runtime.Caller(0)
	b, err := os.ReadFile(filepath.Join(filepath.Dir(here), "..", "..", "deploy", "crds", "clusterprofiles.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(b, &crd); err != nil {
		t.Fatalf("deploy/crds/clusterprofiles.yaml: %v", err)
	}
	ac, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ac.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, &crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	WaitFor(t, "the ClusterProfile CRD is established", time.Minute, func() bool {
		got, err := ac.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		for _, c := range got.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return true
			}
		}
		return false
	})
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: InventoryNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &Inventory{T: t, Ctx: ctx, Client: dc.Resource(sources.ClusterProfileGVR).Namespace(InventoryNamespace)}
}

// ProfileAccess is one access provider of a profile: the provider's name, the member's server
// and CA, and the plugin's cluster config naming the fleet cluster whose token it hands out.
type ProfileAccess struct {
	Provider, Server string
	CA               []byte
	Member           string
}

// AccessTo reaches fleet cluster c through provider.
func AccessTo(t testing.TB, c *fleet.Cluster, provider string) ProfileAccess {
	t.Helper()
	ca, err := os.ReadFile(c.CACertFile())
	if err != nil {
		t.Fatal(err)
	}
	return ProfileAccess{Provider: provider, Server: c.URL(), CA: ca, Member: c.Name}
}

// Set creates or updates profile name (labelled x-k8s.io/cluster-manager=test) with
// ControlPlaneHealthy health ("True", "False") and one access provider.
func (inv *Inventory) Set(name, health string, access ProfileAccess) {
	inv.T.Helper()
	u, err := inv.Client.Get(inv.Ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		u = &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ClusterProfile",
			"metadata": map[string]any{"name": name, "labels": map[string]any{"x-k8s.io/cluster-manager": "test"}},
			"spec":     map[string]any{"displayName": name, "clusterManager": map[string]any{"name": "test"}},
		}}
		if u, err = inv.Client.Create(inv.Ctx, u, metav1.CreateOptions{}); err != nil {
			inv.T.Fatalf("create ClusterProfile %s: %v", name, err)
		}
	} else if err != nil {
		inv.T.Fatal(err)
	}
	cluster := map[string]any{"server": access.Server, "certificate-authority-data": access.CA,
		"extensions": []any{map[string]any{"name": sources.ExecExtension, "extension": map[string]any{"cluster": access.Member}}}}
	var status map[string]any
	b, _ := json.Marshal(map[string]any{
		"conditions": []any{map[string]any{"type": sources.ControlPlaneHealthy, "status": health, "reason": "Probed",
			"message": "probed by the test", "lastTransitionTime": time.Now().UTC().Format(time.RFC3339)}},
		"accessProviders": []any{map[string]any{"name": access.Provider, "cluster": cluster}},
	})
	if err := json.Unmarshal(b, &status); err != nil {
		inv.T.Fatal(err)
	}
	u.Object["status"] = status
	if _, err := inv.Client.UpdateStatus(inv.Ctx, u, metav1.UpdateOptions{}); err != nil {
		inv.T.Fatalf("status of ClusterProfile %s: %v", name, err)
	}
}

// Delete deletes profile name.
func (inv *Inventory) Delete(name string) {
	inv.T.Helper()
	if err := inv.Client.Delete(inv.Ctx, name, metav1.DeleteOptions{}); err != nil {
		inv.T.Fatalf("delete ClusterProfile %s: %v", name, err)
	}
}

// WriteProviderFile writes a provider file naming the test plugin (fleet.BuildExecPluginT)
// twice: "fleet-tokens" hands out each member's exec token (logging each call to log, if not
// empty), "broken" fails.
func WriteProviderFile(t testing.TB, plugin, fleetDir, log string) string {
	t.Helper()
	args := []string{"--fleet-dir", fleetDir}
	if log != "" {
		args = append(args, "--log", log)
	}
	b, err := json.Marshal(map[string]any{"providers": []any{
		map[string]any{"name": "fleet-tokens", "execConfig": map[string]any{"apiVersion": "client.authentication.k8s.io/v1",
			"command": plugin, "args": args, "provideClusterInfo": true}},
		map[string]any{"name": "broken", "execConfig": map[string]any{"apiVersion": "client.authentication.k8s.io/v1",
			"command": plugin, "args": []string{"--fail", "token service unavailable"}, "provideClusterInfo": true}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "providers.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
