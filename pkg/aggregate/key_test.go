package aggregate

import (
	"strings"
	"testing"
)

func TestKeyRoundTrip(t *testing.T) {
	for _, k := range []Key{
		{Cluster: "fleet-1", Namespace: "default", Name: "nginx"},
		{Cluster: "fleet-1", Name: "node-0"},
		{Cluster: "gke_proj_europe-west1_prod", Namespace: "kube-system", Name: "coredns-abc"},
		{Cluster: "admin@kind.local:6443", Name: "x"},
	} {
		s := k.String()
		got, err := ParseKey(s)
		if err != nil || got != k {
			t.Errorf("ParseKey(%q) = %+v, %v; want %+v", s, got, err, k)
		}
	}
	if got := (Key{Cluster: "c", Namespace: "ns", Name: "n"}).String(); got != "c|ns/n" {
		t.Errorf("String = %q, want c|ns/n", got)
	}
}

func TestParseKeyRejects(t *testing.T) {
	for _, s := range []string{"", "c", "|ns/n", "c|", "c|/n", "c|ns/", "c|a/b/c", "c|a|b", "c d|n", "-c|n", "c/x|n"} {
		if k, err := ParseKey(s); err == nil {
			t.Errorf("ParseKey(%q) = %+v, want an error", s, k)
		}
	}
}

func TestValidateClusterName(t *testing.T) {
	for _, ok := range []string{"fleet-1", "a", "kind-kind", "gke_p_z_n", "user@cluster", "x.y:443"} {
		if err := ValidateClusterName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "arn:aws:eks:us-east-1:1:cluster/prod", "a|b", "-a", "a-", "a b", strings.Repeat("a", 254)} {
		if err := ValidateClusterName(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// FuzzKey checks that ParseKey never panics, that whatever it accepts is canonical, and that every
// valid Key survives the round trip.
func FuzzKey(f *testing.F) {
	for _, s := range []string{"c|ns/n", "c|n", "fleet-1|default/nginx", "c||", "c|/", "a|b/c/d", "x@y:1|z"} {
		f.Add(s, "ns", "name")
	}
	f.Fuzz(func(t *testing.T, s, ns, name string) {
		if k, err := ParseKey(s); err == nil {
			if k.String() != s {
				t.Fatalf("ParseKey(%q).String() = %q", s, k.String())
			}
			if err := k.Validate(); err != nil {
				t.Fatalf("ParseKey(%q) accepted an invalid key: %v", s, err)
			}
		}
		k := Key{Cluster: "fleet-1", Namespace: ns, Name: name}
		if k.Validate() != nil {
			return
		}
		got, err := ParseKey(k.String())
		if err != nil || got != k {
			t.Fatalf("round trip of %+v: %+v, %v", k, got, err)
		}
	})
}
