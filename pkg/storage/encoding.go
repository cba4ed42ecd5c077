package storage

import (
	"bytes"
	"context"
)

// API is the wire form of an answer.
type API string

// The APIs.
const (
	// KubernetesAPI: objects with the cluster annotation and a position as their
	// resourceVersion, PartialObjectMetadata, or Table rows.
	KubernetesAPI API = "kubernetes"
	// NativeAPI: objects as their cluster serves them, with apiVersion and kind.
	NativeAPI API = "native"
)

// Encoding is how an answer's items are written. It travels with a read to a peer, which
// encodes its items so (Item.Raw) for the front that asked to write as they are.
type Encoding struct {
	API API `json:"api"`
	// As is the Kubernetes API's form: "" (objects), "Table" or "PartialObjectMetadata".
	As string `json:"as,omitempty"`
	// TableVersion is a Table's meta.k8s.io version: v1 or v1beta1.
	TableVersion string `json:"tableVersion,omitempty"`
	// IncludeObject is a Table row's object: None, Metadata (the default) or Object.
	IncludeObject string `json:"includeObject,omitempty"`
	// TypeMeta: each object carries its apiVersion and kind, as one object answered alone (a
	// get, a watch event) does; a Kubernetes list's items carry none.
	TypeMeta bool `json:"typeMeta,omitempty"`
}

// Encoder writes the items of one resource in one Encoding.
type Encoder interface {
	// Append appends it, showing rv as its resourceVersion where the encoding shows one.
	Append(buf *bytes.Buffer, it Item, rv string) error
}

// Encoders makes the Encoder of an encoding for a resource (its configured name): the fronts
// know the wire forms, a peer's answer asks them.
type Encoders func(ctx context.Context, e Encoding, resource string) (Encoder, error)
