package peer

import (
	"fmt"
	"slices"
	"strings"

	"github.com/multicache/multicache/pkg/aggregate"
	"github.com/multicache/multicache/pkg/index"
	"github.com/multicache/multicache/pkg/storage"
)

// ProtocolHeader names the envelope's version on a request and its answer. A replica that does
// not answer with it answers in the form of an earlier release.
const ProtocolHeader = "X-Multicache-Peer-Protocol"

// NewestProtocolHeader, on an answer, names the newest envelope version the replica speaks,
// whatever version it answers in: a caller that called it in an older version (it spoke only
// that one a while ago) learns that it was updated.
const NewestProtocolHeader = "X-Multicache-Peer-Protocol-Newest"

// ProtocolVersion is this release's envelope. 3 added the selection's where filter and the
// summary call; 4 sorted lists (sortBy, an item's sort value) and counts, and, before any
// release held it, the owner filter and quantities sorted by value. A replica reads a call's
// body with encoding/json, which ignores the fields it does not know: a replica of an earlier
// version would answer its part whole or in the wrong order. So a call's options change only
// with a new version (TestEnvelopeCallsChangeWithTheVersion holds each version's), and so does
// what a call means (an order, a filter's judgement), which no test can see. A new version
// moves OldestProtocolVersion up to this one, and olderCall and notMeantAlike are written
// again for the pair (TestVersionsArePrevious checks the pair).
const ProtocolVersion = "4"

// OldestProtocolVersion is the oldest envelope this release still speaks, the previous
// release's, so that a rolling update from that release serves the reads both releases answer
// alike:
//   - a call of any version from OldestProtocolVersion to ProtocolVersion is answered in the
//     caller's version (its header names it), unless it asks what the two releases answer
//     differently (notMeantAlike): then 503, to retry once the update is done;
//   - a call goes out in ProtocolVersion. A replica that refuses it with 503 naming an older
//     version this release speaks is called again in that one, when the call means the same
//     there (olderCall); when it does not (a sorted list, an owner filter, a count the caller
//     needs, a value read by a path or a configured index), the call is refused as a replica
//     of another release's is: 503, to retry once the update is done. The refusal is
//     remembered for a while (rememberOlder): calls to that replica that mean the same in its
//     version then go in it at once, without a refused call first, until the replica answers
//     naming a newer version it speaks or in another version (Client.call).
//
// Replicas of versions this release does not speak refuse each other's calls (503, retried),
// and never answer them in part.
const OldestProtocolVersion = "3"

// spoken are the versions this release speaks, the newest first.
var spoken = []string{ProtocolVersion, OldestProtocolVersion}

// Speaks reports whether this release answers and makes calls of envelope version v.
func Speaks(v string) bool { return slices.Contains(spoken, v) }

// AnswerVersion is the version in which a call that names version v is answered, and which
// its answer's header names: v when this release speaks it, else ProtocolVersion (the call is
// refused, and the header tells the caller which version to call in).
func AnswerVersion(v string) string {
	if Speaks(v) {
		return v
	}
	return ProtocolVersion
}

// olderCall is opts as a call of version v, older than ProtocolVersion, asks them, or why it
// cannot. Version 3 lacks:
//   - an order (sortBy, desc) and an owner filter: a replica of 3 would answer unsorted or
//     unfiltered, so such calls are not made in it;
//   - counts: a list that counts only where it can (ListOptions.CountOptional) is asked without
//     its count (its answer has none, and so has the fleet's), and a count-only call, which
//     asks for a part's position and count, asks for its position alone: narrowed to no
//     cluster, as a page in key order asks a part that neither pages nor counts.
//
// Nor is a call made in 3 that 3 would answer differently (notMeantAlike). Every other option
// of a call is 3's as well, with the same meaning.
func olderCall(v string, opts any) (any, error) {
	if v != OldestProtocolVersion {
		return nil, fmt.Errorf("this release does not call in peer protocol %q", v)
	}
	if err := notMeantAlike(v, opts); err != nil {
		return nil, err
	}
	switch o := opts.(type) {
	case storage.ListOptions:
		if o.SortBy != "" || o.Desc {
			return nil, fmt.Errorf("peer protocol %q does not sort lists", v)
		}
		if (o.Count || o.CountOnly) && !o.CountOptional {
			return nil, fmt.Errorf("peer protocol %q does not count lists", v)
		}
		if o.CountOnly {
			o.Selection.Part = []string{}
		}
		o.Count, o.CountOnly = false, false
		return o, nil
	case storage.GetOptions, storage.WatchOptions, storage.SummaryOptions, storage.ClusterOptions, relayRequest:
		return o, nil
	}
	return nil, fmt.Errorf("peer protocol %q: no such call (%T)", v, opts)
}

// notMeantAlike says why a call of version v (OldestProtocolVersion) would be answered
// differently by the two releases, whichever answers it, or nil. Version 3 has no owner
// filter and no summary by owner, and reads values by paths differently: its JSONPaths give
// nothing for a time or a quantity of a typed object (version 4 gives their JSON, as a
// creationTimestamp or "250m"). So a selection by an owner or by a configured index (a
// JSONPath's or a CEL expression's values; the built-in indexes are alike), and a summary by
// owner, by a path (field:) or by a configured index, are not answered across the two.
func notMeantAlike(v string, opts any) error {
	var sel storage.Selection
	var by []string
	switch o := opts.(type) {
	case storage.ListOptions:
		sel = o.Selection
	case storage.GetOptions:
		sel = o.Selection
	case storage.WatchOptions:
		sel = o.Selection
	case storage.SummaryOptions:
		sel, by = o.Selection, o.By
	default:
		return nil
	}
	if sel.Owner != "" {
		return fmt.Errorf("peer protocol %q has no owner filter", v)
	}
	if sel.Index != "" && !builtinIndex(sel.Index) {
		return fmt.Errorf("peer protocol %q reads index %q's values differently", v, sel.Index)
	}
	for _, k := range by {
		name, isIndex := strings.CutPrefix(k, "index:")
		switch {
		case k == "owner": // local.OwnerKey
			return fmt.Errorf("peer protocol %q does not summarize by owner", v)
		case strings.HasPrefix(k, "field:"), isIndex && !builtinIndex(name):
			return fmt.Errorf("peer protocol %q reads %q's values differently", v, k)
		}
	}
	return nil
}

// builtinIndex reports whether name is an index every release answers alike: the aggregate's
// own and the built-in index functions.
func builtinIndex(name string) bool {
	switch name {
	case aggregate.IndexCluster, aggregate.IndexClusterNamespace, aggregate.IndexNamespace:
		return true
	}
	_, ok := index.Builtins()[name]
	return ok
}
