package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/client"
	"github.com/multicache/multicache/pkg/clusterset"
	"github.com/multicache/multicache/pkg/config"
	"github.com/multicache/multicache/pkg/sources"
	"github.com/multicache/multicache/pkg/verify"
)

func newVerify() *cobra.Command {
	var cf clientFlags
	var cfgFile, namespace string
	var kubeconfigs, contexts, excludes []string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "verify RESOURCE",
		Short: "Compare what the daemon serves with what every API server lists, until they agree or --timeout",
		Long: `verify lists RESOURCE from the daemon and, metadata only, from every cluster of the
kubeconfig (or the daemon's --config), and compares each object's UID and resourceVersion.
The daemon follows writes with a small delay, so it compares again every second until both
sides agree or --timeout passes. It exits non-zero, naming the objects, if they never agree.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts := sources.KubeconfigOptions{}
			if cfgFile != "" {
				cfg, err := config.Read(cfgFile)
				if err != nil {
					return err
				}
				opts = cfg.KubeconfigOptions()
			}
			fl := cmd.Flags()
			if fl.Changed("kubeconfig") {
				opts.Paths = kubeconfigs
			}
			if fl.Changed("context") {
				opts.Include = contexts
			}
			if fl.Changed("exclude-context") {
				opts.Exclude = excludes
			}
			src, err := sources.NewKubeconfig(opts)
			if err != nil {
				return err
			}
			clusters, err := src.Load()
			if err != nil {
				return err
			}
			if len(clusters) == 0 {
				return errors.New("--kubeconfig/--context: no clusters selected")
			}
			c, err := cf.client()
			if err != nil {
				return err
			}
			return runVerify(cmd, c, args[0], namespace, clusters, timeout)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&cfgFile, "config", "", "the daemon's YAML config file, for its kubeconfig settings (flags override it)")
	fl.StringArrayVar(&kubeconfigs, "kubeconfig", nil, "kubeconfig file (repeatable; default $KUBECONFIG or ~/.kube/config)")
	fl.StringArrayVar(&contexts, "context", nil, "include contexts matching this glob (repeatable)")
	fl.StringArrayVar(&excludes, "exclude-context", nil, "exclude contexts matching this glob (repeatable)")
	fl.StringVarP(&namespace, "namespace", "n", "", "compare one namespace only")
	fl.DurationVar(&timeout, "timeout", 60*time.Second, "how long to wait for both sides to agree")
	addClientFlags(cmd, &cf)
	return cmd
}

func runVerify(cmd *cobra.Command, c *client.Client, resource, namespace string, clusters []clusterset.ClusterConfig, timeout time.Duration) error {
	ctx := cmd.Context()
	servers := map[string]*rest.Config{}
	var names []string
	for _, cl := range clusters {
		servers[cl.Name] = cl.Config
		names = append(names, cl.Name)
	}
	sort.Strings(names)
	// Resolve once: discovery does not change between attempts.
	gvrs := map[string]schema.GroupVersionResource{}
	for _, name := range names {
		gvr, err := clusterset.ResolveResource(servers[name], resource)
		if meta.IsNoMatchError(err) {
			continue // not served there: the daemon must hold none of it either
		}
		if err != nil {
			return fmt.Errorf("cluster %q: %w", name, err)
		}
		gvrs[name] = gvr
	}
	deadline := time.Now().Add(timeout)
	for attempt := 1; ; attempt++ {
		truth := map[aggregate.Key]string{}
		for name, gvr := range gvrs {
			t, err := verify.Truth(ctx, gvr, namespace, map[string]*rest.Config{name: servers[name]})
			if err != nil {
				return err
			}
			maps.Copy(truth, t)
		}
		cached, err := daemonStates(cmd.Context(), c, resource, namespace, servers)
		if err != nil {
			return err
		}
		rep := verify.Diff(resource, cached, truth)
		if len(rep.Diverged) == 0 || !time.Now().Before(deadline) {
			printVerify(cmd, names, rep, truth)
			if len(rep.Diverged) > 0 {
				return fmt.Errorf("%s: %d of %d objects diverged after %s", resource, len(rep.Diverged), rep.Objects, timeout)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %d objects in %d clusters, converged (attempt %d)\n", resource, rep.Objects, len(names), attempt)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// daemonStates lists resource from the daemon and returns the state of every object of the
// given clusters.
func daemonStates(ctx context.Context, c *client.Client, resource, namespace string, servers map[string]*rest.Config) (map[aggregate.Key]string, error) {
	list, err := c.ListAll(ctx, resource, client.Query{Namespace: namespace, Limit: 500})
	if err != nil {
		return nil, err
	}
	out := map[aggregate.Key]string{}
	for _, it := range list.Items {
		if _, ok := servers[it.Cluster]; !ok {
			continue
		}
		var o api.ObjectMeta
		if err := json.Unmarshal(it.Object, &o); err != nil {
			return nil, fmt.Errorf("cluster %q: object: %w", it.Cluster, err)
		}
		m := o.Metadata
		out[aggregate.Key{Cluster: it.Cluster, Namespace: m.Namespace, Name: m.Name}] = verify.State(m.UID, m.ResourceVersion)
	}
	return out, nil
}

func printVerify(cmd *cobra.Command, names []string, rep verify.Report, truth map[aggregate.Key]string) {
	type counts struct{ objects, missing, extra, stale int }
	per := map[string]*counts{}
	for _, n := range names {
		per[n] = &counts{}
	}
	for k := range truth {
		per[k.Cluster].objects++
	}
	for _, d := range rep.Diverged {
		c := per[d.Key.Cluster]
		switch d.Kind {
		case verify.Missing:
			c.missing++
		case verify.Extra:
			c.extra++
		case verify.Stale:
			c.stale++
		}
	}
	tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 3, ' ', 0)
	fmt.Fprintln(tw, "CLUSTER\tOBJECTS\tMISSING\tEXTRA\tSTALE")
	for _, n := range names {
		c := per[n]
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\n", n, c.objects, c.missing, c.extra, c.stale)
	}
	_ = tw.Flush()
	var first []string
	for _, d := range rep.Diverged[:min(10, len(rep.Diverged))] {
		first = append(first, "  "+d.String())
	}
	if len(first) > 0 {
		fmt.Fprintln(cmd.OutOrStdout(), strings.Join(first, "\n"))
	}
}
