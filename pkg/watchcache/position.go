package watchcache

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"

	"github.com/multicache/multicache/pkg/aggregate"
)

// Position is where a list or a watch stands in a resource's change stream: a resourceVersion,
// opaque to clients. It is either one Cache's position (Epoch and Seq), or, for an answer
// merged from several replicas, each replica's own position (Parts).
//
// Every position the daemon hands out is this one codec: base64url of its JSON, unpadded.
type Position struct {
	// Epoch names the Cache's current run of sequence numbers; Seq is the sequence of the
	// newest event the position reflects.
	Epoch string `json:"e,omitempty"`
	Seq   uint64 `json:"s,omitempty"`
	// Parts is, per replica, its position in a merged answer: valid while that replica owns
	// the same clusters (Set).
	Parts map[string]PartPosition `json:"p,omitempty"`
}

// PartPosition is one replica's position in a merged answer.
type PartPosition struct {
	// RV is the replica's own Position, encoded; "" when it has not told one yet.
	RV string `json:"r,omitempty"`
	// Set identifies the clusters the replica answered for (ClusterSet).
	Set string `json:"h"`
}

// Merged reports whether p is a merged answer's position.
func (p Position) Merged() bool { return len(p.Parts) > 0 }

// String encodes p as a resourceVersion.
func (p Position) String() string { return encode(p) }

// Part is the position in p of the replica peer answering for the clusters set: "" and false
// when p holds none for it, or one for another set of clusters.
func (p Position) Part(peer, set string) (string, bool) {
	pp, ok := p.Parts[peer]
	if !ok || pp.Set != set {
		return "", false
	}
	return pp.RV, true
}

// ParsePosition decodes a resourceVersion the daemon handed out, of one Cache or merged.
func ParsePosition(s string) (Position, error) {
	var p Position
	// Exactly one of the two forms: one Cache's, or a merged answer's with its parts.
	if err := decode(s, &p); err != nil || (p.Epoch == "") == (len(p.Parts) == 0) {
		return Position{}, fmt.Errorf("resourceVersion %q: not a multicache resourceVersion", s)
	}
	return p, nil
}

// ParseSingle decodes the resourceVersion of one Cache. A merged one is expired here, not
// malformed: it comes from an answer of several replicas, and the caller now reaches one.
func ParseSingle(s string) (Position, error) {
	p, err := ParsePosition(s)
	if err != nil {
		return p, err
	}
	if p.Merged() {
		return Position{}, &GoneError{Msg: "resourceVersion comes from an answer merged from several replicas, and this replica now answers alone; list again"}
	}
	return p, nil
}

// Continue resumes a paged list: after the key Last, at the list's Position, which every page
// of the list carries. A Continue without a position (a replica's page of a merged list that
// held none for it) continues after Last from the replica's position now.
type Continue struct {
	Last string `json:"k"`
	Position
	// Exact: the list reads the Cache's snapshot at Position (resourceVersionMatch=Exact), not
	// the stores.
	Exact bool `json:"x,omitempty"`
	// SortBy and Desc are a sorted list's order, and Sort the sort value of the item Last: its
	// pages continue after (Sort, Last) in that order, and only a list of the same order may
	// use the token.
	SortBy string `json:"sb,omitempty"`
	Desc   bool   `json:"sd,omitempty"`
	Sort   string `json:"sv,omitempty"`
}

// String encodes c as a continue token. One Cache's position is also written as rv, encoded,
// the form replicas of the previous release read, so that paging through a rolling update
// goes on.
func (c Continue) String() string {
	if c.Epoch == "" {
		return encode(c)
	}
	return encode(struct {
		Continue
		RV string `json:"rv"`
	}{c, c.Position.String()})
}

// After is the key to continue after.
func (c Continue) After() aggregate.Key {
	k, _ := aggregate.ParseKey(c.Last)
	return k
}

// ParseContinue decodes a continue token the daemon handed out.
func ParseContinue(s string) (Continue, error) {
	var c struct {
		Continue
		// Legacy tokens carried their position encoded in rv.
		RV string `json:"rv,omitempty"`
	}
	err := decode(s, &c)
	if err == nil && c.RV != "" && c.Epoch == "" && len(c.Parts) == 0 {
		c.Position, err = ParsePosition(c.RV) // the previous release's form
	}
	if err == nil && c.Epoch != "" && len(c.Parts) > 0 {
		err = errors.New("both forms of position")
	}
	if err == nil {
		_, err = aggregate.ParseKey(c.Last)
	}
	if err != nil {
		return Continue{}, fmt.Errorf("continue %q: malformed token", s)
	}
	return c.Continue, nil
}

// ClusterSet identifies a sorted list of clusters: a replica's position in a merged answer is
// valid for the same set only.
func ClusterSet(sorted []string) string {
	h := fnv.New64a()
	for _, c := range sorted {
		_, _ = h.Write([]byte(c))
		_, _ = h.Write([]byte{0})
	}
	return strconv.FormatUint(h.Sum64(), 36)
}

func encode(v any) string {
	b, _ := json.Marshal(v)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decode(s string, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// GoneError is a position that cannot be continued from: of another epoch, older than the
// events kept, from before a cluster it spans moved away, or from another replica's answer.
// The APIs answer it 410 Gone, and clients list again.
type GoneError struct{ Msg string }

func (e *GoneError) Error() string { return e.Msg }

// IsGone reports whether err is a GoneError.
func IsGone(err error) bool {
	var g *GoneError
	return errors.As(err, &g)
}
