package shard

import (
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/multicache/multicache/pkg/clusterset"
)

func validOptions() Options {
	return Options{
		Client:       fake.NewClientset(),
		Namespace:    "multicache",
		Identity:     "replica-a",
		AdvertiseURL: "https://replica-a.multicache.svc:8443",
		Source:       clusterset.Static{},
	}
}

func TestOptionsDefault(t *testing.T) {
	o := validOptions()
	o.Identity = ""
	o.Default()
	if err := o.Validate(); err != nil {
		t.Fatalf("defaulted options: %v", err)
	}
	if o.LeaseDuration != 15*time.Second || o.Weight != 1 || o.MaxWarmups != 4 || o.Logger == nil || o.Clock == nil {
		t.Errorf("defaults: %+v", o)
	}
	if !strings.Contains(o.Identity, "-") || len(o.Identity) > maxIdentity {
		t.Errorf("default identity %q", o.Identity)
	}
}

func TestLabelPrefix(t *testing.T) {
	for host, want := range map[string]string{
		"":                             "multicache",
		"node-1":                       "node-1",
		"Node_1.Example.COM":           "node-1-example-com",
		"---":                          "multicache",
		strings.Repeat("a", 80):        strings.Repeat("a", 41),
		strings.Repeat("a", 40) + ".b": strings.Repeat("a", 40),
	} {
		if got := labelPrefix(host, maxIdentity-6); got != want {
			t.Errorf("labelPrefix(%q) = %q, want %q", host, got, want)
		}
		o := validOptions()
		o.Identity = labelPrefix(host, maxIdentity-6) + "-abcde"
		o.Default()
		if err := o.Validate(); err != nil {
			t.Errorf("identity from host %q: %v", host, err)
		}
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*Options)
		want   string
	}{
		{"client", func(o *Options) { o.Client = nil }, "Options.Client is required"},
		{"source", func(o *Options) { o.Source = nil }, "Options.Source is required"},
		{"namespace", func(o *Options) { o.Namespace = "" }, "sharding.namespace: required"},
		{"bad namespace", func(o *Options) { o.Namespace = "Not_A_Namespace" }, `sharding.namespace: "Not_A_Namespace"`},
		{"identity", func(o *Options) { o.Identity = "UPPER" }, `sharding.identity: "UPPER"`},
		{"long identity", func(o *Options) { o.Identity = strings.Repeat("a", maxIdentity+1) }, "sharding.identity:"},
		{"url", func(o *Options) { o.AdvertiseURL = "" }, "--advertise-url: required"},
		{"url scheme", func(o *Options) { o.AdvertiseURL = "ftp://host" }, `--advertise-url: scheme "ftp"`},
		{"url host", func(o *Options) { o.AdvertiseURL = "http:///path" }, "--advertise-url: has no host"},
		{"url parse", func(o *Options) { o.AdvertiseURL = "http://[::1" }, "--advertise-url: not a URL"},
		{"url user", func(o *Options) { o.AdvertiseURL = "https://user:secret@host" }, "--advertise-url: must not carry user information"},
		{"lease", func(o *Options) { o.LeaseDuration = 500 * time.Millisecond }, "sharding.leaseDuration: 500ms: must be at least 1s"},
		{"weight", func(o *Options) { o.Weight = -1 }, "sharding.weight: -1: must be from 1 to 100"},
		{"weight too big", func(o *Options) { o.Weight = MaxWeight + 1 }, "sharding.weight: 101: must be from 1 to 100"},
		{"warmups", func(o *Options) { o.MaxWarmups = -2 }, "sharding.maxWarmups: -2: must be at least 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := validOptions()
			o.Default()
			tc.change(&o)
			err := o.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want an error containing %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("error repeats a credential: %v", err)
			}
			if _, err := New(o); err == nil {
				t.Errorf("New accepted options Validate rejects")
			}
		})
	}
	o := validOptions()
	o.Default()
	if err := o.Validate(); err != nil {
		t.Fatalf("valid options: %v", err)
	}
}
