package e2e

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/multicache/multicache/pkg/api"
	"github.com/multicache/multicache/test/harness"
)

type objectMeta struct {
	Name            string            `json:"name"`
	Namespace       string            `json:"namespace"`
	UID             string            `json:"uid"`
	ResourceVersion string            `json:"resourceVersion"`
	Labels          map[string]string `json:"labels"`
}

type apiObject struct {
	Kind       string     `json:"kind"`
	APIVersion string     `json:"apiVersion"`
	Metadata   objectMeta `json:"metadata"`
}

// listItem is an api.Item with its object's kind and metadata decoded.
type listItem struct {
	Cluster string    `json:"cluster"`
	Object  apiObject `json:"object"`
}

// decoded decodes it's object.
func decoded(it api.Item) (listItem, error) {
	out := listItem{Cluster: it.Cluster}
	return out, json.Unmarshal(it.Object, &out.Object)
}

func (it listItem) key() string {
	return it.Cluster + "|" + strings.TrimPrefix(it.Object.Metadata.Namespace+"/", "/") + it.Object.Metadata.Name
}

// TestMain removes the binary built for the run.
func TestMain(m *testing.M) {
	code := m.Run()
	harness.RemoveBinary()
	os.Exit(code)
}
