// Package fanout is the storage.Reader and storage.Status of the fleet when replicas share it
// (a Fleet, the shard Coordinator): each read is split into a plan, one part per replica that
// owns clusters of it, each part read through a Reader (this replica's own, package local; a
// peer's, package peer), and their answers merged.
//
// Invariants (docs/ARCHITECTURE.md, "Moves"): each cluster is asked of exactly one replica, its
// owner; any part's error is the whole answer's (a refusal as the part gave it, a failure as
// 503 with Retry-After), and a cluster without a live owner makes a list, a get that finds
// nothing, or a watch that starts with the current objects 503: never an answer without a
// cluster's objects; a watch ends with 410 when its plan changes in any way. A read that one
// other replica answers whole is that replica's answer, positions and all; one merged from
// several shows the fleet's position (a Position with a part per replica), which every item of
// a list shows too and a fleet watch resumes from.
//
// Files: plan.go (Fleet, plan, guard, positions of parts), fanout.go (Reader, gather and
// refusal), list.go (List: key-ordered pages, the streamed merge of unpaged lists; Get),
// watch.go (the fan-in), status.go (Status), summary.go (Summarize: the parts' counts added).
package fanout
