package aggregate

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/cache"
)

// Key names one object in the fleet. Cluster-scoped objects have an empty Namespace.
type Key struct {
	Cluster   string
	Namespace string
	Name      string
}

// Separator divides the cluster from the client-go key in Key.String. Cluster names can never
// hold it (ValidateClusterName), nor can namespaces or names.
const Separator = "|"

// String is "cluster|namespace/name", or "cluster|name" for a cluster-scoped object: the cluster,
// the separator, then exactly client-go's MetaNamespaceKeyFunc key. For every k with
// k.Validate() == nil, ParseKey(k.String()) == k.
func (k Key) String() string {
	if k.Namespace == "" {
		return k.Cluster + Separator + k.Name
	}
	return k.Cluster + Separator + k.Namespace + "/" + k.Name
}

// ObjectKey is the client-go key within the cluster: "namespace/name" or "name".
func (k Key) ObjectKey() string {
	if k.Namespace == "" {
		return k.Name
	}
	return k.Namespace + "/" + k.Name
}

// Validate reports why k cannot round-trip through String and ParseKey.
func (k Key) Validate() error {
	if err := ValidateClusterName(k.Cluster); err != nil {
		return err
	}
	if k.Name == "" {
		return fmt.Errorf("key: name is empty")
	}
	for field, v := range map[string]string{"namespace": k.Namespace, "name": k.Name} {
		if strings.ContainsAny(v, "/"+Separator) {
			return fmt.Errorf("key: %s %q holds '/' or %q", field, v, Separator)
		}
	}
	return nil
}

// ParseKey parses the form Key.String produces and nothing else: it rejects empty segments,
// more than one '/', and invalid cluster names, so ParseKey(s) succeeding means
// ParseKey(s).String() == s.
func ParseKey(s string) (Key, error) {
	cluster, rest, ok := strings.Cut(s, Separator)
	if !ok {
		return Key{}, fmt.Errorf("key %q: no %q between cluster and object", s, Separator)
	}
	if err := ValidateClusterName(cluster); err != nil {
		return Key{}, fmt.Errorf("key %q: %w", s, err)
	}
	k := Key{Cluster: cluster}
	if ns, name, ok := strings.Cut(rest, "/"); !ok {
		k.Name = rest
	} else {
		if strings.Contains(name, "/") {
			return Key{}, fmt.Errorf("key %q: more than one '/' after the cluster", s)
		}
		if ns == "" {
			return Key{}, fmt.Errorf("key %q: empty namespace before '/'", s)
		}
		k.Namespace, k.Name = ns, name
	}
	if k.Name == "" {
		return Key{}, fmt.Errorf("key %q: empty name", s)
	}
	if strings.Contains(k.Name, Separator) || strings.Contains(k.Namespace, Separator) {
		return Key{}, fmt.Errorf("key %q: %q may appear only once", s, Separator)
	}
	return k, nil
}

// KeyOf builds the Key of obj in cluster. obj may be a cache.DeletedFinalStateUnknown.
func KeyOf(cluster string, obj any) (Key, error) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		ns, name, err := cache.SplitMetaNamespaceKey(d.Key)
		return Key{Cluster: cluster, Namespace: ns, Name: name}, err
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return Key{}, err
	}
	return Key{Cluster: cluster, Namespace: m.GetNamespace(), Name: m.GetName()}, nil
}

// ValidateClusterName accepts 1–253 characters of letters, digits, '.', '_', ':', '@' and '-',
// starting and ending with a letter or digit. That covers kind-, GKE- and most kubeconfig context
// names; names with '/' (EKS ARNs, for example) must be renamed. Cluster names appear in keys,
// URL paths and metric labels, so anything else is refused.
func ValidateClusterName(name string) error {
	if name == "" {
		return fmt.Errorf("cluster name is empty")
	}
	if len(name) > 253 {
		return fmt.Errorf("cluster name %q: longer than 253 characters", name)
	}
	if !validClusterName(name) {
		return fmt.Errorf("cluster name %q: only letters, digits, '.', '_', ':', '@' and '-' are allowed, starting and ending with a letter or digit (rename the context)", name)
	}
	return nil
}

// validClusterName matches ^[A-Za-z0-9]([A-Za-z0-9._:@-]*[A-Za-z0-9])?$ without a regexp: it
// runs on every key parse.
func validClusterName(s string) bool {
	alnum := func(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' }
	if !alnum(s[0]) || !alnum(s[len(s)-1]) {
		return false
	}
	for i := 1; i < len(s)-1; i++ {
		c := s[i]
		if !alnum(c) && c != '.' && c != '_' && c != ':' && c != '@' && c != '-' {
			return false
		}
	}
	return true
}
