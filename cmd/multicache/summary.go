package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/client"
)

func newSummary() *cobra.Command {
	var cf clientFlags
	var by, byArgs, clusters []string
	var allNS, byKey bool
	var ns, labelSel, fieldSel, where, owner, output string
	var limit int
	var watch bool
	var interval time.Duration
	cmd := &cobra.Command{
		Use:   "summary RESOURCE --by KEY[,KEY]",
		Short: "Count objects across the fleet in groups, on the daemon",
		Long: `Count the objects a list would answer, grouped by the values of keys, without moving them:
  cluster, namespace      the object's cluster, its namespace
  label:<key>             a label's value (null without it)
  field:<path>            a JSONPath's values, e.g. spec.nodeName or spec.containers[*].image;
                          an object with several values counts once in each
  index:<name>            a configured index's values
  owner                   the top-level owner (Pod -> ReplicaSet -> Deployment, as cached)

With --watch, a new summary is printed whenever the counts change, at most once per --interval.

Examples:
  multicache summary pods --by cluster,field:status.phase -A
  multicache summary pods --by field:spec.containers[*].image -A --limit 20
  multicache summary pods --by owner --where "object.status.phase == 'Pending'" --watch`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != "table" && output != "json" {
				return fmt.Errorf("-o %q: want table or json", output)
			}
			for _, v := range byArgs {
				by = append(by, aggregate.SplitGroupKeys(v)...)
			}
			if len(by) == 0 {
				return fmt.Errorf("--by: at least one key is required")
			}
			if limit < 0 {
				return fmt.Errorf("--limit %d: want 0 (all) or more", limit)
			}
			q := client.Query{LabelSelector: labelSel, FieldSelector: fieldSel, Where: where, Owner: owner, Clusters: clusters}
			if !allNS && ns != "" {
				q.Namespace = ns
			}
			c, err := cf.client()
			if err != nil {
				return err
			}
			so := client.SummaryOptions{By: by, ByKey: byKey, Limit: limit}
			show := func(s *api.Summary) error {
				for _, fr := range s.Clusters {
					if !fr.Synced && !fr.NotServed && !fr.Forbidden {
						fmt.Fprintf(cmd.ErrOrStderr(), "warning: cluster %s is not synced (%s): its counts may be stale or missing\n", fr.Name, fr.Error)
					}
				}
				return printSummary(cmd.OutOrStdout(), s, output)
			}
			if watch {
				first := true
				return c.WatchSummary(cmd.Context(), args[0], q, so, interval, func(s *api.Summary) error {
					if !first && output == "table" {
						fmt.Fprintln(cmd.OutOrStdout())
					}
					first = false
					return show(s)
				})
			}
			if interval != 0 {
				return fmt.Errorf("--interval: given without --watch")
			}
			s, err := c.Summarize(cmd.Context(), args[0], q, so)
			if err != nil {
				return err
			}
			return show(s)
		},
	}
	fl := cmd.Flags()
	fl.StringArrayVar(&byArgs, "by", nil, "keys to group by, comma-separated or repeated: cluster, namespace, label:<key>, field:<path>, index:<name>, owner (the top-level owner); a comma inside a path's brackets belongs to the path")
	fl.BoolVar(&byKey, "sort-by-key", false, "order groups by key instead of by count (most first)")
	fl.IntVar(&limit, "limit", 0, "keep only the first groups (0: all)")
	fl.BoolVarP(&allNS, "all-namespaces", "A", false, "every namespace (the default unless -n is given)")
	fl.StringVarP(&ns, "namespace", "n", "", "only this namespace")
	fl.StringVarP(&labelSel, "selector", "l", "", "label selector")
	fl.StringVar(&fieldSel, "field-selector", "", "field selector (metadata.name, metadata.namespace, spec.nodeName, status.phase, or an index name)")
	fl.StringVar(&where, "where", "", "a CEL expression over object that each object must make true, evaluated on the daemon (e.g. \"object.spec.containers.exists(c, c.image.startsWith('nginx:'))\")")
	fl.StringVar(&owner, "owner", "", "only what is under this owner, group/Kind/namespace/name (core for the core group), followed through ownerReferences on the daemon (e.g. apps/Deployment/shop/web)")
	fl.StringArrayVar(&clusters, "cluster", nil, "only this cluster (repeatable)")
	fl.BoolVarP(&watch, "watch", "w", false, "print a new summary whenever the counts change")
	fl.DurationVar(&interval, "interval", 0, "with --watch: at most one summary per interval (default 1s on the daemon; at least 100ms)")
	fl.StringVarP(&output, "output", "o", "table", "table or json")
	addClientFlags(cmd, &cf)
	return cmd
}

func printSummary(w io.Writer, s *api.Summary, output string) error {
	if output == "json" {
		b, err := json.MarshalIndent(s, "", "  ")
		if err != nil {
			return err
		}
		_, err = w.Write(append(b, '\n'))
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	head := make([]string, 0, len(s.By)+1)
	for _, k := range s.By {
		head = append(head, strings.ToUpper(k))
	}
	fmt.Fprintln(tw, strings.Join(append(head, "COUNT"), "\t"))
	for _, g := range s.Groups {
		cells := make([]string, 0, len(s.By)+1)
		for _, k := range s.By {
			v := "<none>"
			if p := g.Key[k]; p != nil {
				v = *p
			}
			cells = append(cells, v)
		}
		fmt.Fprintln(tw, strings.Join(append(cells, fmt.Sprint(g.Count)), "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%d objects in %d groups\n", s.Total, len(s.Groups))
	return err
}
