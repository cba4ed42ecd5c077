package kubeapi

import (
	"fmt"
	"mime"
	"net/http"
	"strings"

	"github.com/multicache/multicache/pkg/storage"
)

// negotiate reads the Accept header into the Encoding of the answer: the first entry the server
// can answer wins. JSON is the only encoding; a client that offers protobuf first (generated
// clients do) offers JSON too. None that can be served is 406.
func negotiate(r *http.Request) (storage.Encoding, error) {
	e := storage.Encoding{API: storage.KubernetesAPI}
	accept := r.Header.Get("Accept")
	if strings.TrimSpace(accept) == "" {
		return e, nil
	}
	for _, entry := range strings.Split(accept, ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(entry))
		if err != nil {
			continue
		}
		if mt != "application/json" && mt != "*/*" && mt != "application/*" {
			continue
		}
		switch as := params["as"]; {
		case as == "":
			return e, nil
		case as == "Table" && params["g"] == "meta.k8s.io" && (params["v"] == "v1" || params["v"] == "v1beta1"):
			e.As, e.TableVersion = "Table", params["v"]
			return e, nil
		case (as == "PartialObjectMetadata" || as == "PartialObjectMetadataList") && params["g"] == "meta.k8s.io" && params["v"] == "v1":
			e.As = "PartialObjectMetadata"
			return e, nil
		}
	}
	return e, storage.Error(http.StatusNotAcceptable, fmt.Sprintf("none of the media types accepted (%s) can be served: the server answers application/json, as objects, Table (meta.k8s.io v1, v1beta1) or PartialObjectMetadata (meta.k8s.io v1)", accept))
}
