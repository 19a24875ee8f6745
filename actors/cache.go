package actors

import (
	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/persistence"
)

// HashCache is a partition actor's in-memory view of its window (SPEC.md §8).
// Its only output is the watermark sent with each push; it never decides a
// verdict. Implementations are owned by one actor and need no locking.
type HashCache interface {
	// Watermark returns an offset X such that none of hashes occurs at or below
	// X in the partition, or -1 when the cache cannot vouch for that.
	Watermark(hashes []queen.Hash) int64
	// Observe records a commit's outcome (the hashes written and their offsets).
	Observe(batch *persistence.PushBatch, out *persistence.PushOutcome)
	// Forget drops everything (after an error whose outcome is unknown).
	Forget()
}

// noCache is the cache of this issue: it never vouches, so every probe covers
// the whole window.
type noCache struct{}

func (noCache) Watermark([]queen.Hash) int64                             { return -1 }
func (noCache) Observe(*persistence.PushBatch, *persistence.PushOutcome) {}
func (noCache) Forget()                                                  {}
