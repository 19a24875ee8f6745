package shards

import "github.com/queen-mq/queen-go/transport/wire"

// DefaultCount is the default number of shards (SPEC.md §9).
const DefaultCount = 64

// SubjectPrefix is the prefix of the internal shard subjects
// (wire.ShardSubjectPrefix). A partition's shard is queen.ShardOf, the
// subject of shard n's pushes wire.ShardPushSubject(n): the Go client
// computes both in the same place.
const SubjectPrefix = wire.ShardSubjectPrefix
