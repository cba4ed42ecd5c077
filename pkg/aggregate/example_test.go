package aggregate_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/util/workqueue"

	"github.com/multicache/multicache/pkg/aggregate"
)

// A fleet-wide controller, as client-go controllers are written: a handler puts keys in a
// rate-limiting workqueue, workers take them, read the current object by key and reconcile it,
// retrying failures and forgetting successes. Here the two clusters are client-go's fake
// clientsets; in a program, clusterset.Registry builds and joins the informers.
func Example_controller() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	configMaps, members, _ := aggregate.New(aggregate.Options{Resource: "configmaps"})
	for _, cluster := range []string{"east", "west"} {
		cs := fake.NewClientset(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "settings"},
			Data: map[string]string{"region": cluster}})
		inf := informers.NewSharedInformerFactory(cs, 0).Core().V1().ConfigMaps().Informer()
		go inf.RunWithContext(ctx)
		if err := members.Join(cluster, inf); err != nil {
			panic(err)
		}
	}

	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[aggregate.Key]())
	defer queue.ShutDown()
	if _, err := configMaps.AddEventHandler(aggregate.QueueKeys(queue)); err != nil {
		panic(err)
	}

	var mu sync.Mutex
	var reconciled []string
	reconcile := func(k aggregate.Key) error {
		obj, exists, err := configMaps.Get(k)
		if err != nil || !exists {
			return err // gone: nothing to do
		}
		mu.Lock()
		defer mu.Unlock()
		reconciled = append(reconciled, fmt.Sprintf("%s in cluster %s: region=%s", k.ObjectKey(), k.Cluster, obj.(*corev1.ConfigMap).Data["region"]))
		return nil
	}
	go func() { // one worker
		for {
			k, shutdown := queue.Get()
			if shutdown {
				return
			}
			if err := reconcile(k); err != nil {
				queue.AddRateLimited(k) // retried later, with backoff
			} else {
				queue.Forget(k)
			}
			queue.Done(k)
		}
	}()

	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		n := len(reconciled)
		mu.Unlock()
		if n == 2 {
			break
		}
	}
	mu.Lock()
	defer mu.Unlock()
	sort.Strings(reconciled)
	for _, r := range reconciled {
		fmt.Println("reconciled", r)
	}
	// Output:
	// reconciled shop/settings in cluster east: region=east
	// reconciled shop/settings in cluster west: region=west
}
