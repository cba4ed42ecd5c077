// Command fleet starts, stops and disturbs a local fleet of kube-apiserver + etcd clusters.
//
//	fleet up --dir DIR --clusters N      start N clusters, leave them running, print the kubeconfig
//	fleet down --dir DIR                 stop exactly those processes and remove DIR
//	fleet VERB --dir DIR --cluster NAME  stop-apiserver, start-apiserver, kill-etcd, start-etcd,
//	                                     compact, revoke, restore
//	fleet seed --dir DIR --objects N     write about N realistic objects into every cluster
//	fleet seed --dir DIR --bulk-pods N   write N Pods (and a ConfigMap per namespace) into every
//	                                     cluster's etcd directly, as the benchmarks do
//	fleet status --dir DIR               one line per cluster and process
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/multicache/multicache/test/fleet"
)

func main() {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if err := newRoot().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(1)
	}
}

func newRoot() *cobra.Command {
	var dir string
	root := &cobra.Command{
		Use:           "fleet",
		Short:         "Run a local fleet of real kube-apiserver + etcd clusters on 127.0.0.1",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&dir, "dir", ".fleet", "the fleet's directory")
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }

	var clusters, aliases int
	var cm bool
	var bin string
	up := &cobra.Command{
		Use:   "up",
		Short: "Start clusters and leave them running in the background",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := fleet.Start(cmd.Context(), fleet.Options{
				Clusters: clusters, Dir: dir, BinDir: bin, Detach: true, ControllerManager: cm, Logf: logf,
			})
			if err != nil {
				return err
			}
			fmt.Printf("kubeconfig: %s\ncontexts:   %s\n", f.Kubeconfig(), strings.Join(f.Names(), " "))
			if aliases > 0 {
				path := filepath.Join(f.Dir, "aliases.kubeconfig")
				names, err := f.WriteAliases(path, aliases)
				if err != nil {
					return fmt.Errorf("--aliases: %w", err)
				}
				fmt.Printf("aliases:    %s (%d contexts, %d per cluster, sharing its API server)\n", path, len(names), aliases)
			}
			return nil
		},
	}
	up.Flags().IntVar(&clusters, "clusters", 3, "how many clusters")
	up.Flags().IntVar(&aliases, "aliases", 0, "also write aliases.kubeconfig, where each cluster appears this many times (1..999), as clusters of their own to multicache")
	up.Flags().BoolVar(&cm, "controller-manager", false, "also run kube-controller-manager in every cluster")
	up.Flags().StringVar(&bin, "bin-dir", "", "where etcd and kube-apiserver are (default: the checkout's bin/)")

	down := &cobra.Command{
		Use:   "down",
		Short: "Stop the fleet's processes by PID and remove its directory",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := fleet.Load(dir)
			if err != nil {
				return err
			}
			pids := f.PIDs()
			if err := f.Stop(); err != nil {
				return err
			}
			fmt.Printf("stopped %d processes, removed %s\n", len(pids), f.Dir)
			return nil
		},
	}

	var objects, bulkPods int
	var crdClusters []string
	seed := &cobra.Command{
		Use:   "seed",
		Short: "Write about --objects realistic objects into every cluster",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if objects <= 0 {
				return fmt.Errorf("--objects: must be positive, got %d", objects)
			}
			if bulkPods < 0 || bulkPods%10 != 0 {
				return fmt.Errorf("--bulk-pods: want a non-negative multiple of 10 (10 namespaces), got %d", bulkPods)
			}
			f, err := fleet.Load(dir)
			if err != nil {
				return err
			}
			if bulkPods > 0 {
				l, err := fleet.NewLoader(f)
				if err != nil {
					return err
				}
				start := time.Now()
				n, err := l.BulkSeed(cmd.Context(), fleet.BulkSpec{Namespaces: 10, PodsPerNamespace: bulkPods / 10, ConfigMapsPerNamespace: 1, Nodes: 100})
				if err != nil {
					return err
				}
				fmt.Printf("wrote %d objects into each cluster's etcd in %s\n", n, time.Since(start).Round(time.Millisecond))
				return nil
			}
			if !cmd.Flags().Changed("crd-clusters") {
				crdClusters = f.Names()[:max(1, len(f.Names())-1)]
			}
			l, err := fleet.NewLoader(f)
			if err != nil {
				return err
			}
			w, err := l.Seed(cmd.Context(), fleet.SpecForObjects(objects, crdClusters))
			if err != nil {
				return err
			}
			fmt.Printf("created %d objects in %s (%.0f/s)\n", w.Creates, w.Elapsed.Round(time.Millisecond), w.Rate())
			return nil
		},
	}
	seed.Flags().IntVar(&objects, "objects", 1000, "objects per cluster")
	seed.Flags().IntVar(&bulkPods, "bulk-pods", 0, "instead of --objects, write this many Pods into each cluster's etcd directly (fleet.BulkSeed: 10 namespaces, 100 node names)")
	seed.Flags().StringSliceVar(&crdClusters, "crd-clusters", nil, "clusters that get the Widget CRD (default: all but the last)")

	status := &cobra.Command{
		Use:   "status",
		Short: "Print each cluster's URL and processes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := fleet.Load(dir)
			if err != nil {
				return err
			}
			fmt.Printf("kubeconfig: %s\n", f.Kubeconfig())
			for _, c := range f.Clusters {
				fmt.Printf("%-10s %s  apiserver=%s etcd=%s\n", c.Name, c.URL(), c.ProcessState("apiserver"), c.ProcessState("etcd"))
			}
			return nil
		},
	}

	root.AddCommand(up, down, seed, status)
	for _, v := range []struct {
		use, short string
		run        func(ctx context.Context, c *fleet.Cluster) (string, error)
	}{
		{"stop-apiserver", "Stop one cluster's kube-apiserver (etcd and data stay)", func(ctx context.Context, c *fleet.Cluster) (string, error) {
			return "kube-apiserver stopped", c.StopAPIServer()
		}},
		{"start-apiserver", "Start one cluster's kube-apiserver again and wait for /readyz", func(ctx context.Context, c *fleet.Cluster) (string, error) {
			return "kube-apiserver ready", c.StartAPIServer(ctx)
		}},
		{"kill-etcd", "Kill one cluster's etcd with SIGKILL (data stays)", func(ctx context.Context, c *fleet.Cluster) (string, error) {
			return "etcd killed", c.KillEtcd()
		}},
		{"start-etcd", "Start one cluster's etcd again on its data", func(ctx context.Context, c *fleet.Cluster) (string, error) {
			return "etcd healthy", c.StartEtcd(ctx)
		}},
		{"compact", "Compact one cluster's etcd at its current revision", func(ctx context.Context, c *fleet.Cluster) (string, error) {
			rev, err := c.Compact(ctx)
			return fmt.Sprintf("compacted at revision %d", rev), err
		}},
		{"revoke", "Revoke the kubeconfig's credential for one cluster (401 from then on)", func(ctx context.Context, c *fleet.Cluster) (string, error) {
			return "credential revoked", c.Revoke(ctx)
		}},
		{"restore", "Issue a new credential for one cluster and rewrite the kubeconfig", func(ctx context.Context, c *fleet.Cluster) (string, error) {
			return "credential restored, kubeconfig rewritten", c.Restore(ctx)
		}},
	} {
		var cluster string
		cmd := &cobra.Command{
			Use:   v.use + " --cluster NAME",
			Short: v.short,
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				if cluster == "" {
					return fmt.Errorf("%s: --cluster is required", v.use)
				}
				f, err := fleet.Load(dir)
				if err != nil {
					return err
				}
				c, err := f.Cluster(cluster)
				if err != nil {
					return err
				}
				msg, err := v.run(cmd.Context(), c)
				if err != nil {
					return err
				}
				fmt.Printf("%s: %s\n", c.Name, msg)
				return nil
			},
		}
		cmd.Flags().StringVar(&cluster, "cluster", "", "the cluster (context name), e.g. fleet-1")
		root.AddCommand(cmd)
	}
	return root
}
