package discovery

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/multicache/multicache/internal/fakeapi"
	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/clusterset"
)

// TestOpenAPIV2Merge: the v2 document takes each group-version's paths, and the definitions
// they use, from the member chosen for it; a member that cannot be read is left out.
func TestOpenAPIV2Merge(t *testing.T) {
	a, b := fakeapi.New(t), fakeapi.New(t)
	reg, err := clusterset.New(clusterset.Options{Source: clusterset.Static{{Name: "a", Config: a.Config(), Fingerprint: "1"}, {Name: "b", Config: b.Config(), Fingerprint: "1"}},
		Resources: []clusterset.ResourceSpec{{Name: "pods"}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); _ = reg.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	if missing := reg.WaitForSync(ctx, 20*time.Second); missing != nil {
		t.Fatalf("unsynced: %v", missing)
	}
	o := &OpenAPI{Configs: reg.RESTConfig, Timeout: 5 * time.Second, Logger: zap.NewNop()}
	doc, failed, err := o.buildV2(context.Background(), map[string]string{"api/v1": "a", "apis/x.io/v1": "b", "apis/y.io/v1": "nowhere"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(failed, []string{"nowhere"}) {
		t.Errorf("failed %v, want [nowhere]", failed)
	}
	pods, things := doc.Paths.Paths["/api/v1/pods"], doc.Paths.Paths["/apis/x.io/v1/things"]
	if pods.Get == nil || pods.Get.Description != "pods of "+a.Config().Host || things.Get == nil || things.Get.Description != "things of "+b.Config().Host {
		t.Errorf("paths: pods %+v, things %+v: want pods from a, things from b", pods.Get, things.Get)
	}
	pod, thing := doc.Definitions["io.k8s.api.core.v1.Pod"], doc.Definitions["io.x.v1.Thing"]
	if pod.Description != "Pod of "+a.Config().Host || thing.Description != "Thing of "+b.Config().Host {
		t.Errorf("definitions: Pod %q, Thing %q: want each from the member its paths came from", pod.Description, thing.Description)
	}
	if len(doc.Paths.Paths) != 2 || !strings.Contains(doc.Info.Description, "a, b") || !strings.Contains(doc.Info.Description, api.ClusterAnnotation) {
		t.Errorf("%d paths, description %q", len(doc.Paths.Paths), doc.Info.Description)
	}
	if _, _, err := o.buildV2(context.Background(), map[string]string{"api/v1": "nowhere"}); err == nil {
		t.Error("no member readable: want an error")
	}
}
