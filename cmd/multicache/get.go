package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"
)

type listItem struct {
	Cluster string         `json:"cluster"`
	Object  map[string]any `json:"object"`
}

type clusterFresh struct {
	Name      string `json:"name"`
	Synced    bool   `json:"synced"`
	NotServed bool   `json:"notServed"`
	Error     string `json:"error"`
}

type listResponse struct {
	Items           []listItem     `json:"items"`
	Continue        string         `json:"continue"`
	ResourceVersion string         `json:"resourceVersion"`
	Clusters        []clusterFresh `json:"clusters"`
}

func newGet() *cobra.Command {
	var c client
	var allNS bool
	var ns, labelSel, fieldSel, output string
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
			q := url.Values{}
			if !allNS {
				if ns == "" {
					ns = "default"
				}
				q.Set("namespace", ns)
			}
			if labelSel != "" {
				q.Set("labelSelector", labelSel)
			}
			fs := fieldSel
			if len(args) == 2 {
				fs = strings.Trim(fs+",metadata.name="+args[1], ",")
			}
			if fs != "" {
				q.Set("fieldSelector", fs)
			}
			for _, cl := range clusters {
				q.Add("cluster", cl)
			}
			q.Set("limit", "500")
			var all listResponse
			for {
				var page listResponse
				if err := c.get(cmd.Context(), "/api/v1/resources/"+url.PathEscape(args[0]), q, &page); err != nil {
					return err
				}
				all.Items = append(all.Items, page.Items...)
				all.Clusters, all.ResourceVersion = page.Clusters, page.ResourceVersion
				if page.Continue == "" {
					break
				}
				q.Set("continue", page.Continue)
			}
			for _, cf := range all.Clusters {
				if !cf.Synced && !cf.NotServed {
					fmt.Fprintf(cmd.ErrOrStderr(), "warning: cluster %s is not synced (%s): its results may be stale or missing\n", cf.Name, cf.Error)
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
	fl.StringArrayVar(&clusters, "cluster", nil, "only this cluster (repeatable)")
	fl.StringVarP(&output, "output", "o", "table", "table, wide, json, yaml or name")
	addClientFlags(cmd, &c)
	return cmd
}

func printItems(w io.Writer, resp listResponse, output string) error {
	switch output {
	case "json", "yaml":
		if resp.Items == nil {
			resp.Items = []listItem{}
		}
		b, err := json.MarshalIndent(map[string]any{"items": resp.Items, "clusters": resp.Clusters}, "", "  ")
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
	case "name":
		for _, it := range resp.Items {
			fmt.Fprintf(w, "%s/%s/%s\n", it.Cluster, strings.ToLower(str(it.Object, "kind")), str(it.Object, "metadata", "name"))
		}
		return nil
	}
	if len(resp.Items) == 0 {
		fmt.Fprintln(w, "No resources found.")
		return nil
	}
	namespaced := false
	for _, it := range resp.Items {
		if str(it.Object, "metadata", "namespace") != "" {
			namespaced = true
		}
	}
	kind := str(resp.Items[0].Object, "kind")
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
	for _, it := range resp.Items {
		row := []string{it.Cluster}
		if namespaced {
			row = append(row, str(it.Object, "metadata", "namespace"))
		}
		row = append(row, str(it.Object, "metadata", "name"))
		for _, c := range cols {
			v := c.get(it.Object)
			if v == "" {
				v = "<none>"
			}
			row = append(row, v)
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
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
