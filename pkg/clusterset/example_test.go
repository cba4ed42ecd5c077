package clusterset_test

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/pkg/index"
	"github.com/multicache/multicache/pkg/sources"
)

// Example embeds multicache in place of one informer factory per cluster: every context of a
// kubeconfig, Pods indexed by image across the fleet, and one handler for all clusters.
// test/integration runs the same flow against real API servers.
func Example() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	src, err := sources.NewKubeconfig(sources.KubeconfigOptions{
		Paths:   []string{"/path/to/kubeconfig"},
		Include: []string{"prod-*"},
	})
	if err != nil {
		panic(err)
	}
	reg, err := clusterset.New(clusterset.Options{
		Source: src,
		Resources: []clusterset.ResourceSpec{{
			Name:    "pods",
			Indexes: []aggregate.IndexSpec{{Name: index.Image, Func: index.ByImage}},
		}},
	})
	if err != nil {
		panic(err)
	}
	pods, _ := reg.Aggregate("pods")
	_, _ = pods.AddEventHandler(aggregate.HandlerFuncs{
		AddFunc: func(cluster string, obj any, initial bool) {
			fmt.Println("pod", cluster, obj.(*corev1.Pod).Name)
		},
	})
	go func() { _ = reg.Start(ctx) }()

	// Wait, but not forever for a dead cluster: the answer names the missing ones.
	if missing := reg.WaitForSync(ctx, time.Minute); missing != nil {
		fmt.Println("not synced:", missing)
	}
	res, _ := pods.Select(aggregate.Query{Index: index.Image, Value: "nginx:1.27.3"})
	for _, it := range res.Items {
		fmt.Println(it.Key()) // e.g. prod-eu|default/web-0
	}
	if len(res.Unsynced) > 0 {
		fmt.Println("partial: no fresh data from", res.Unsynced)
	}
}
