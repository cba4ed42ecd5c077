package peer

import (
	"fmt"
	"slices"

	"github.com/multicache/multicache/pkg/storage"
)

// ProtocolHeader names the envelope's version on a request and its answer. A replica that does
// not answer with it answers in the form of an earlier release.
const ProtocolHeader = "X-Multicache-Peer-Protocol"

// ProtocolVersion is this release's envelope. 3 added the selection's where filter and the
// summary call; 4 sorted lists (sortBy, an item's sort value) and counts, and, before any
// release held it, the owner filter and quantities sorted by value. A replica reads a call's
// body with encoding/json, which ignores the fields it does not know: a replica of an earlier
// version would answer its part whole or in the wrong order. So a call's options change only
// with a new version (TestEnvelopeCallsChangeWithTheVersion holds each version's), and so does
// what a call means (an order, a filter's judgement), which no test can see.
const ProtocolVersion = "4"

// OldestProtocolVersion is the oldest envelope this release still speaks, the previous
// release's, so that a rolling update from that release serves the reads both releases answer
// alike:
//   - a call of any version from OldestProtocolVersion to ProtocolVersion is answered in the
//     caller's version (its header names it). Version 3's calls are version 4's without what 4
//     added, and mean the same in 4; their answers are read alike (the sort value and the count
//     come only when asked for);
//   - a call goes out in ProtocolVersion. A replica that refuses it and names an older version
//     this release speaks is called again in that one, when the call means the same there
//     (olderCall); when it does not (a sorted list, an owner filter, a count the caller needs),
//     the call is refused as a replica of another release's is: 503, to retry once the update
//     is done.
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
// Every other option of a call is 3's as well, with the same meaning.
func olderCall(v string, opts any) (any, error) {
	if v != OldestProtocolVersion {
		return nil, fmt.Errorf("this release does not call in peer protocol %q", v)
	}
	owner := func(s storage.Selection) error {
		if s.Owner != "" {
			return fmt.Errorf("peer protocol %q has no owner filter", v)
		}
		return nil
	}
	switch o := opts.(type) {
	case storage.ListOptions:
		if err := owner(o.Selection); err != nil {
			return nil, err
		}
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
	case storage.GetOptions:
		return o, owner(o.Selection)
	case storage.WatchOptions:
		return o, owner(o.Selection)
	case storage.SummaryOptions:
		if slices.Contains(o.By, "owner") { // local.OwnerKey
			return nil, fmt.Errorf("peer protocol %q does not summarize by owner", v)
		}
		return o, owner(o.Selection)
	case storage.ClusterOptions, relayRequest:
		return o, nil
	}
	return nil, fmt.Errorf("peer protocol %q: no such call (%T)", v, opts)
}
