package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"

	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/pkg/client"
)

// mirror keeps, per cluster|namespace/name, the resourceVersion of every object.
type mirror map[string]string

func key(cluster string, raw json.RawMessage) (string, string) {
	var o api.ObjectMeta
	_ = json.Unmarshal(raw, &o)
	return cluster + "|" + o.Metadata.Namespace + "/" + o.Metadata.Name, o.Metadata.ResourceVersion
}

func (m mirror) Replace(l *api.List) {
	clear(m)
	for _, it := range l.Items {
		k, rv := key(it.Cluster, it.Object)
		m[k] = rv
	}
}

func (m mirror) Event(ev api.WatchEvent) {
	k, rv := key(ev.Cluster, ev.Object)
	if ev.Type == api.Deleted {
		delete(m, k)
		return
	}
	m[k] = rv
}

// A program that asks a running daemon one fleet question, then keeps a mirror of every
// cluster's Pods in namespace "shop" until its context ends.
func Example() {
	c, err := client.New(client.Options{Server: "http://127.0.0.1:8080"})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	web, err := c.ListAll(ctx, "pods", client.Query{LabelSelector: "app=web", Limit: 500})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(web.Items), "web pods in", len(web.Clusters), "clusters")

	pods := mirror{}
	c.Follow(ctx, "pods", client.Query{Namespace: "shop"}, pods, client.FollowOptions{})
}
