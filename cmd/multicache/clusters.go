package main

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/multicache/multicache/pkg/api"
)

func newClusters() *cobra.Command {
	var cf clientFlags
	var watch, wide bool
	var interval time.Duration
	cmd := &cobra.Command{
		Use:   "clusters",
		Short: "Show each cluster's sync state (--watch follows it live)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := cf.client()
			if err != nil {
				return err
			}
			last := ""
			for {
				resp, err := c.Clusters(cmd.Context())
				if err != nil {
					return err
				}
				var buf bytes.Buffer
				printClusters(&buf, resp, wide || watch)
				if out := buf.String(); out != last {
					if watch {
						fmt.Fprintf(cmd.OutOrStdout(), "--- %s\n", time.Now().Format(time.TimeOnly))
					}
					_, _ = io.WriteString(cmd.OutOrStdout(), out)
					last = out
				}
				if !watch {
					return nil
				}
				select {
				case <-cmd.Context().Done():
					return nil
				case <-time.After(interval):
				}
			}
		},
	}
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "print again whenever anything changes, with per-resource detail")
	cmd.Flags().BoolVar(&wide, "wide", false, "one line per cluster × resource")
	cmd.Flags().DurationVar(&interval, "interval", time.Second, "poll interval with --watch")
	addClientFlags(cmd, &cf)
	return cmd
}

func printClusters(w io.Writer, resp *api.Clusters, perResource bool) {
	tw := tabwriter.NewWriter(w, 0, 4, 3, ' ', 0)
	if perResource {
		fmt.Fprintln(tw, "CLUSTER\tRESOURCE\tSTATE\tOBJECTS\tPROGRESS\tERROR")
		for _, cl := range resp.Clusters {
			for _, r := range cl.Resources {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", cl.Name, r.Resource, r.State, r.Objects, progressText(r), r.Error)
			}
		}
		_ = tw.Flush()
		return
	}
	// OWNER shows when replicas share the fleet: the replica that runs each cluster.
	owners := slices.ContainsFunc(resp.Clusters, func(c api.Cluster) bool { return c.Owner != "" })
	owner := func(cl api.Cluster) string {
		if !owners {
			return ""
		}
		if cl.Owner == "" {
			return "<none>\t"
		}
		return cl.Owner + "\t"
	}
	fmt.Fprint(tw, "NAME\t")
	if owners {
		fmt.Fprint(tw, "OWNER\t")
	}
	fmt.Fprintln(tw, "STATE\tSYNCED\tOBJECTS\tPROGRESS\tLAST-SYNC\tERROR")
	for _, cl := range resp.Clusters {
		synced, objects := 0, 0
		for _, r := range cl.Resources {
			if r.State == "Synced" || r.State == "NotServed" {
				synced++
			}
			objects += r.Objects
		}
		errText := cl.Error
		if len(errText) > 80 {
			errText = errText[:77] + "..."
		}
		lastSync := ""
		if cl.LastSync != nil {
			lastSync = age(cl.LastSync.Format(time.RFC3339))
		}
		fmt.Fprintf(tw, "%s\t%s%s\t%d/%d\t%d\t%s\t%s\t%s\n", cl.Name, owner(cl), cl.State, synced, len(cl.Resources), objects, progressText(cl.Resources...), strings.TrimSpace(lastSync), errText)
	}
	_ = tw.Flush()
}

// progressText sums the lists of rs not yet synced (see api.ProgressText).
func progressText(rs ...api.Resource) string {
	var ps []api.Progress
	for _, r := range rs {
		if r.Syncing() {
			ps = append(ps, *r.Progress)
		}
	}
	return api.ProgressText(ps...)
}
