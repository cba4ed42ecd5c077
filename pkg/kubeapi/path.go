package kubeapi

import (
	"fmt"
	"strings"
)

// path is a request path of the Kubernetes API, in the fleet view or, under
// /clusters/{cluster}, in one cluster's.
type path struct {
	cluster string // "" in the fleet view
	// what: "version", "api" (/api), "apis" (/apis), "group" (/apis/{g}), "resources"
	// (/api/v1, /apis/{g}/{v}) or "object" (a collection or an object).
	what                         string
	group, version               string
	resource, namespace, name    string
	subresource                  string
	watchPath                    bool // the deprecated /watch/ form
	namespacedPath, clusterScope bool // which of the two path forms was used
}

// parsePath parses urlPath; ok is false when it is not a Kubernetes API path at all.
func parsePath(urlPath string) (p path, ok bool, err error) {
	rest := strings.TrimSuffix(urlPath, "/")
	if after, found := strings.CutPrefix(rest, "/clusters/"); found {
		name, tail, _ := strings.Cut(after, "/")
		if name == "" {
			return p, true, fmt.Errorf("cluster: empty name in %q", urlPath)
		}
		p.cluster, rest = name, "/"+tail
		rest = strings.TrimSuffix(rest, "/")
	}
	segs := strings.Split(strings.TrimPrefix(rest, "/"), "/")
	switch {
	case rest == "/version":
		p.what = "version"
		return p, true, nil
	case rest == "/api":
		p.what = "api"
		return p, true, nil
	case rest == "/apis":
		p.what = "apis"
		return p, true, nil
	case segs[0] == "api" && len(segs) >= 2:
		p.version, segs = segs[1], segs[2:]
	case segs[0] == "apis" && len(segs) == 2:
		p.what, p.group = "group", segs[1]
		return p, true, nil
	case segs[0] == "apis" && len(segs) >= 3:
		p.group, p.version, segs = segs[1], segs[2], segs[3:]
	default:
		return p, p.cluster != "", fmt.Errorf("no such path: %s", urlPath)
	}
	if len(segs) == 0 {
		p.what = "resources"
		return p, true, nil
	}
	p.what = "object"
	if segs[0] == "watch" {
		p.watchPath, segs = true, segs[1:]
		if len(segs) == 0 {
			return p, true, fmt.Errorf("no resource in %s", urlPath)
		}
	}
	if segs[0] == "namespaces" && len(segs) >= 3 {
		p.namespacedPath = true
		p.namespace, segs = segs[1], segs[2:]
	} else {
		p.clusterScope = true
	}
	p.resource = segs[0]
	if len(segs) > 1 {
		p.name = segs[1]
	}
	if len(segs) > 2 {
		p.subresource = strings.Join(segs[2:], "/")
	}
	if p.resource == "" || (p.namespacedPath && p.namespace == "") || (len(segs) > 1 && p.name == "") {
		return p, true, fmt.Errorf("empty segment in %s", urlPath)
	}
	return p, true, nil
}

// objectPath is the path of p's object or collection, without a cluster prefix.
func (p path) objectPath() string {
	out := "/api/" + p.version
	if p.group != "" {
		out = "/apis/" + p.group + "/" + p.version
	}
	if p.namespace != "" {
		out += "/namespaces/" + p.namespace
	}
	out += "/" + p.resource
	if p.name != "" {
		out += "/" + p.name
	}
	return out
}
