package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/client"
)

// row is one item of a list, decoded for printing.
type row struct {
	cluster string
	object  map[string]any
}

func newGet() *cobra.Command {
	var cf clientFlags
	var allNS bool
	var ns, labelSel, fieldSel, where, owner, sortBy, output string
	var desc bool
	var clusters []string
	cmd := &cobra.Command{
		Use:   "get RESOURCE [NAME]",
		Short: "List or get objects across the fleet from a running daemon",
		Args:  cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch output {
			case "table", "wide", "json", "yaml", "name":
			default:
				return fmt.Errorf("-o %q: want table, wide, json, yaml or name", output)
			}
			q := client.Query{LabelSelector: labelSel, Clusters: clusters, Limit: 500}
			if !allNS {
				if ns == "" {
					ns = "default"
				}
				q.Namespace = ns
			}
			q.FieldSelector, q.Where, q.Owner, q.SortBy, q.Desc = fieldSel, where, owner, sortBy, desc
			if desc && sortBy == "" {
				return fmt.Errorf("--desc: needs --sort-by")
			}
			if len(args) == 2 {
				q.FieldSelector = strings.Trim(fieldSel+",metadata.name="+args[1], ",")
			}
			c, err := cf.client()
			if err != nil {
				return err
			}
			all, err := c.ListAll(cmd.Context(), args[0], q)
			if err != nil {
				return err
			}
			for _, fr := range all.Clusters {
				if !fr.Synced && !fr.NotServed {
					fmt.Fprintf(cmd.ErrOrStderr(), "warning: cluster %s is not synced (%s): its results may be stale or missing\n", fr.Name, fr.Error)
				}
			}
			if len(args) == 2 && len(all.Items) == 0 {
				return fmt.Errorf("%s %q not found", args[0], args[1])
			}
			return printItems(cmd.OutOrStdout(), all, output)
		},
	}
	fl := cmd.Flags()
	fl.BoolVarP(&allNS, "all-namespaces", "A", false, "every namespace")
	fl.StringVarP(&ns, "namespace", "n", "", "namespace (default \"default\"; ignored for cluster-scoped resources)")
	fl.StringVarP(&labelSel, "selector", "l", "", "label selector")
	fl.StringVar(&fieldSel, "field-selector", "", "field selector (metadata.name, metadata.namespace, spec.nodeName, status.phase, or an index name)")
	fl.StringVar(&where, "where", "", "a CEL expression over object that each object must make true, evaluated on the daemon (e.g. \"object.spec.containers.exists(c, c.image.startsWith('nginx:'))\")")
	fl.StringVar(&sortBy, "sort-by", "", "a JSONPath whose first value orders the objects, sorted on the daemon across every cluster (e.g. metadata.creationTimestamp, status.containerStatuses[0].restartCount); default: by cluster, namespace, name")
	fl.BoolVar(&desc, "desc", false, "with --sort-by: descending")
	fl.StringVar(&owner, "owner", "", "only what is under this owner, group/Kind/namespace/name (core for the core group), followed through ownerReferences on the daemon (e.g. apps/Deployment/shop/web)")
	fl.StringArrayVar(&clusters, "cluster", nil, "only this cluster (repeatable)")
	fl.StringVarP(&output, "output", "o", "table", "table, wide, json, yaml or name")
	addClientFlags(cmd, &cf)
	return cmd
}

func printItems(w io.Writer, resp *api.List, output string) error {
	switch output {
	case "json", "yaml":
		items := resp.Items
		if items == nil {
			items = []api.Item{}
		}
		b, err := json.MarshalIndent(struct {
			Items    []api.Item             `json:"items"`
			Clusters []api.ClusterFreshness `json:"clusters"`
		}{items, resp.Clusters}, "", "  ")
		if err != nil {
			return err
		}
		if output == "yaml" {
			if b, err = yaml.JSONToYAML(b); err != nil {
				return err
			}
		} else {
			b = append(b, '\n')
		}
		_, err = w.Write(b)
		return err
	}
	rows := make([]row, 0, len(resp.Items))
	for _, it := range resp.Items {
		var o map[string]any
		if err := json.Unmarshal(it.Object, &o); err != nil {
			return fmt.Errorf("cluster %q: object: %w", it.Cluster, err)
		}
		rows = append(rows, row{it.Cluster, o})
	}
	if output == "name" {
		for _, r := range rows {
			fmt.Fprintf(w, "%s/%s/%s\n", r.cluster, strings.ToLower(str(r.object, "kind")), str(r.object, "metadata", "name"))
		}
		return nil
	}
	if len(rows) == 0 {
		fmt.Fprintln(w, "No resources found.")
		return nil
	}
	namespaced := false
	for _, r := range rows {
		if str(r.object, "metadata", "namespace") != "" {
			namespaced = true
		}
	}
	kind := str(rows[0].object, "kind")
	cols := columnsFor(kind, output == "wide")
	tw := tabwriter.NewWriter(w, 0, 4, 3, ' ', 0)
	head := []string{"CLUSTER"}
	if namespaced {
		head = append(head, "NAMESPACE")
	}
	head = append(head, "NAME")
	for _, c := range cols {
		head = append(head, c.name)
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, r := range rows {
		cells := []string{r.cluster}
		if namespaced {
			cells = append(cells, str(r.object, "metadata", "namespace"))
		}
		cells = append(cells, str(r.object, "metadata", "name"))
		for _, c := range cols {
			v := c.get(r.object)
			if v == "" {
				v = "<none>"
			}
			cells = append(cells, v)
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	return tw.Flush()
}

type column struct {
	name string
	get  func(map[string]any) string
}

func columnsFor(kind string, wide bool) []column {
	age := column{"AGE", func(o map[string]any) string { return age(str(o, "metadata", "creationTimestamp")) }}
	var cols []column
	switch kind {
	case "Pod":
		cols = []column{
			{"READY", func(o map[string]any) string {
				ready := 0
				for _, s := range list(o, "status", "containerStatuses") {
					if b, _ := s.(map[string]any)["ready"].(bool); b {
						ready++
					}
				}
				return fmt.Sprintf("%d/%d", ready, len(list(o, "spec", "containers")))
			}},
			{"STATUS", func(o map[string]any) string { return str(o, "status", "phase") }},
			{"NODE", func(o map[string]any) string { return str(o, "spec", "nodeName") }},
			age,
		}
		if wide {
			cols = append(cols, column{"IMAGES", func(o map[string]any) string {
				var imgs []string
				for _, c := range list(o, "spec", "containers") {
					imgs = append(imgs, str(c.(map[string]any), "image"))
				}
				return strings.Join(imgs, ",")
			}})
		}
	case "Node":
		cols = []column{{"ZONE", func(o map[string]any) string {
			return str(o, "metadata", "labels", "topology.kubernetes.io/zone")
		}}, age}
		if wide {
			cols = append(cols, column{"INSTANCE-TYPE", func(o map[string]any) string {
				return str(o, "metadata", "labels", "node.kubernetes.io/instance-type")
			}})
		}
	case "Deployment":
		cols = []column{
			{"READY", func(o map[string]any) string {
				return fmt.Sprintf("%s/%s", num(o, "status", "readyReplicas"), num(o, "spec", "replicas"))
			}},
			{"UP-TO-DATE", func(o map[string]any) string { return num(o, "status", "updatedReplicas") }},
			{"AVAILABLE", func(o map[string]any) string { return num(o, "status", "availableReplicas") }},
			age,
		}
	case "ConfigMap", "Secret":
		cols = []column{{"DATA", func(o map[string]any) string {
			d, _ := o["data"].(map[string]any)
			return fmt.Sprint(len(d))
		}}, age}
	case "Namespace":
		cols = []column{{"STATUS", func(o map[string]any) string { return str(o, "status", "phase") }}, age}
	default:
		cols = []column{age}
	}
	return cols
}

func walk(o map[string]any, path ...string) any {
	var cur any = o
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[p]
	}
	return cur
}

func str(o map[string]any, path ...string) string {
	s, _ := walk(o, path...).(string)
	return s
}

func num(o map[string]any, path ...string) string {
	if f, ok := walk(o, path...).(float64); ok {
		return fmt.Sprint(int64(f))
	}
	return "0"
}

func list(o map[string]any, path ...string) []any {
	l, _ := walk(o, path...).([]any)
	return l
}

// age renders a timestamp as kubectl does: 5s, 3m, 2h, 4d.
func age(ts string) string {
	t, err := time.Parse(time.RFC3339, ts)
	if err != nil {
		return ""
	}
	d := time.Since(t)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}
