package shard

import (
	"crypto/sha256"
	"encoding/binary"
	"math"
)

// member is a peer as ownership sees it: a live replica and its weight.
type member struct {
	id     string
	weight int
}

// unit maps peer and cluster to a number in (0,1), uniformly: the first 53 bits of
// SHA-256(peer + "/" + cluster), centred in their interval so that neither 0 nor 1 occurs.
func unit(peer, cluster string) float64 {
	sum := sha256.Sum256([]byte(peer + "/" + cluster))
	x := binary.BigEndian.Uint64(sum[:8]) >> 11
	return (float64(x) + 0.5) / (1 << 53)
}

// score is the weighted rendezvous score -weight/ln(u). For independent uniform u, the peer
// with the highest score is each peer with probability weight/Σweights.
func score(peer, cluster string, weight int) float64 {
	return -float64(weight) / math.Log(unit(peer, cluster))
}

// owner is the member with the highest score for cluster, ties going to the smaller ID; ""
// when there are no members. Removing a member moves only the clusters it won; adding one
// moves clusters only to it.
func owner(members []member, cluster string) string {
	best, bestScore := "", 0.0
	for _, m := range members {
		s := score(m.id, cluster, m.weight)
		if best == "" || s > bestScore || s == bestScore && m.id < best {
			best, bestScore = m.id, s
		}
	}
	return best
}
