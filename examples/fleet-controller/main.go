// Command fleet-controller is a controller-runtime reconciler over every cluster of a fleet
// that reads through multicache: it puts a label on every ConfigMap it sees. Its clusters are
// the contexts of a kubeconfig, as multicache's daemon reads them; a context added to the file
// is engaged, a context removed is disengaged. Reads (the reconciler's Get, the controller's
// watches) come from one multicache Registry; writes (the label) go to each cluster's API
// server.
//
//	fleet-controller --kubeconfig fleet.kubeconfig --label multicache.io/seen=true
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/zapr"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/cluster"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/pkg/crcache"
	"github.com/multicache/multicache/pkg/sources"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "fleet-controller:", err)
		os.Exit(1)
	}
}

func run() error {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig whose contexts are the fleet's clusters (required)")
	label := flag.String("label", "multicache.io/seen=true", "the label, key=value, to put on every ConfigMap")
	namespace := flag.String("namespace", "", "only the ConfigMaps of this namespace (default: every namespace)")
	workers := flag.Int("workers", 4, "reconciles at once")
	flag.Parse()
	if *kubeconfig == "" {
		return errors.New("--kubeconfig: required")
	}
	key, value, ok := strings.Cut(*label, "=")
	if !ok || key == "" {
		return fmt.Errorf("--label %q: want key=value", *label)
	}
	if *workers < 1 {
		return fmt.Errorf("--workers %d: want at least 1", *workers)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	log, err := zap.NewProduction()
	if err != nil {
		return err
	}
	ctrllog.SetLogger(zapr.NewLogger(log))

	// The fleet, as multicache reads it: one Registry, one stack per cluster and resource.
	src, err := sources.NewKubeconfig(sources.KubeconfigOptions{Paths: []string{*kubeconfig}, PollInterval: time.Second})
	if err != nil {
		return err
	}
	reg, err := clusterset.New(clusterset.Options{Source: src, Logger: log,
		Resources: []clusterset.ResourceSpec{{Name: "configmaps", Namespace: *namespace}}})
	if err != nil {
		return err
	}
	fleet, err := crcache.NewFleet(reg, crcache.Options{})
	if err != nil {
		return err
	}
	provider := fleet.Provider(crcache.ProviderOptions{Logger: log})

	// One controller for the fleet, of (cluster, namespace, name) requests.
	c, err := controller.NewTypedUnmanaged("fleet-labeler", controller.TypedOptions[crcache.Request]{
		Reconciler:              &labeler{clusters: provider, key: key, value: value},
		MaxConcurrentReconciles: *workers,
		SkipNameValidation:      ptr.To(true),
	})
	if err != nil {
		return err
	}
	engage := engageFunc(func(ctx context.Context, name string, cl cluster.Cluster) error {
		return c.Watch(crcache.Kind(ctx, name, cl, &corev1.ConfigMap{}))
	})

	errs := make(chan error, 2)
	go func() { errs <- fleet.Start(ctx) }()
	go func() { errs <- c.Start(ctx) }()
	go func() { errs <- provider.Start(ctx, engage) }()
	for range 3 {
		if err := <-errs; err != nil && ctx.Err() == nil {
			return err
		}
	}
	return nil
}

// engageFunc adapts a function to crcache.Aware.
type engageFunc func(ctx context.Context, name string, cl cluster.Cluster) error

func (f engageFunc) Engage(ctx context.Context, name string, cl cluster.Cluster) error {
	return f(ctx, name, cl)
}

// labeler puts key=value on the ConfigMap of each request, in its cluster.
type labeler struct {
	clusters interface {
		Get(ctx context.Context, name string) (cluster.Cluster, error)
	}
	key, value string
}

func (l *labeler) Reconcile(ctx context.Context, req crcache.Request) (reconcile.Result, error) {
	cl, err := l.clusters.Get(ctx, req.Cluster)
	if errors.Is(err, crcache.ErrClusterNotFound) {
		return reconcile.Result{}, nil // it left the fleet
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	var cm corev1.ConfigMap
	if err := cl.GetClient().Get(ctx, req.NamespacedName, &cm); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if cm.Labels[l.key] == l.value {
		return reconcile.Result{}, nil
	}
	patch := client.MergeFrom(cm.DeepCopy())
	if cm.Labels == nil {
		cm.Labels = map[string]string{}
	}
	cm.Labels[l.key] = l.value
	if err := cl.GetClient().Patch(ctx, &cm, patch); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(fmt.Errorf("cluster %q: label %s: %w", req.Cluster, req.NamespacedName, err))
	}
	return reconcile.Result{}, nil
}
