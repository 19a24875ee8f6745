package shards

import (
	"fmt"

	"github.com/zeebo/xxh3"
)

// DefaultCount is the default number of shards (SPEC.md §9).
const DefaultCount = 64

// Of returns the shard of partition (queue, partition): XXH3-64 of
// queue + "\x1f" + partition modulo count (SPEC.md §9).
func Of(queue, partition string, count int) int {
	h := xxh3.New()
	h.WriteString(queue)     //nolint:errcheck // never fails
	h.WriteString("\x1f")    //nolint:errcheck
	h.WriteString(partition) //nolint:errcheck
	return int(h.Sum64() % uint64(count))
}

// SubjectPrefix is the prefix of the internal shard subjects.
const SubjectPrefix = "queen.v1.shard"

// PushSubject is the NATS subject that serves pushes for shard n.
func PushSubject(n int) string { return fmt.Sprintf("%s.%d.push", SubjectPrefix, n) }
