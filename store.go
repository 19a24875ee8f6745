package queen

import (
	"time"

	"github.com/google/uuid"
)

// The store protocol: what the drivers of the store ask of it and what it
// answers. The partition actors commit pushes (actors.Store: PushBatch in,
// PushOutcome out, caches hydrated from SidecarSegments), the pop
// coordinator pops partitions (consume.Store: PopSpec in, PopState out);
// persistence.Store implements both against PostgreSQL and
// internal/storetest's MemStore in memory. Plain values, no I/O.

// PushBatch is one partition's share of a commit: the items of one or more
// fused push requests, in mailbox arrival order (SPEC.md §1).
type PushBatch struct {
	PartitionID uuid.UUID
	Items       []*Item
	// LeaderOf[i] is i for an item whose hash does not occur earlier in Items
	// (a leader), else the index of the leader with the same hash (a follower,
	// SPEC.md §3). It is applied only when the window is > 0. nil means every
	// item is a leader.
	LeaderOf []int32
	// Watermark: none of the leaders' hashes outside Suspects occurs inside
	// the window at or below this offset (SPEC.md §8); -1 probes the whole
	// window. It is always a segment boundary (the last offset of a segment
	// the cache saw, or -1): the probe then reads only the sidecar rows of
	// later segments, plus one index lookup per suspect.
	Watermark int64
	// Suspects are hashes the cache may have seen in the partition: each is
	// looked up in the window, whatever the watermark, among the sidecar
	// rows created within its Span (the zero Span: the whole window).
	Suspects map[Hash]Span
	// AssumedWindow is the window (seconds) the cache's knowledge covers: if
	// the window read under the lock is larger (a configure widened it), the
	// watermark is ignored and every hash is looked up.
	AssumedWindow int64
	// PartitionNum is the partition's number (queen.partitions.num, which
	// its segments carry) when the caller learnt it from an earlier
	// PushOutcome of this PartitionID, else 0. With it and a Watermark >= 0
	// the commit takes the partition's row lock where it bumps the
	// allocator, expecting the partition to end at Watermark, instead of
	// locking the row first (persistence.Store.CommitBundle; README,
	// Architecture, "The write authority").
	PartitionNum int64
}

// Span bounds the created_at of the sidecar rows that may hold a suspect
// (both ends included): the generations of the cache whose filters match
// it (SPEC.md §8). A zero end is unbounded. The probe then descends only
// the time ranges of log_txn_hashes that overlap the span.
type Span struct {
	Since, Until time.Time
}

// PushOutcome is the result of one PushBatch's commit
// (persistence.Store.CommitBundle): one Result per item, in order.
type PushOutcome struct {
	Results []Result
	// Window is the dedup window read under the row lock, in seconds.
	Window int64
	// FirstOffset and LastOffset span the new segment; LastOffset < FirstOffset
	// when nothing was written.
	FirstOffset, LastOffset int64
	// CreatedAt is the segment's created_at (zero when nothing was written).
	CreatedAt time.Time
	// FullProbe reports that the probe covered the whole window (watermark -1).
	FullProbe bool
	// PartitionNum is the partition's number, for the next PushBatch of the
	// same PartitionID (0 when the commit failed).
	PartitionNum int64
	// Err is set when this batch alone was answered failed while the
	// bundle's other batches got their verdicts: its partition's row lock
	// was held by another session (ErrLockTimeout).
	Err error
}

// SidecarSegment is one segment's transaction-id hashes: 16 bytes per
// frame in frame order, the first at offset First, stored at CreatedAt. A
// partition's hash cache hydrates from them (SPEC.md §8). With Gone set it
// stands instead for segments that retention removed while their hashes may
// still be inside the window: what they held, stored at or before CreatedAt
// (zero: not known, as late as the newest commit), is unknown to the cache,
// which then probes in full until that time leaves the window.
type SidecarSegment struct {
	First     int64
	CreatedAt time.Time
	Hashes    []byte
	Gone      bool
}

// SidecarPrints is a partition's fingerprints of the sidecar's ranges
// inside its window (migration 0021): what its hash cache reads back for
// segments that retention removed inside the window (SPEC.md §8). Each hash
// the partition stored inside the window before Uncovered (zero: at any
// time) has its fingerprint in one of Sets.
type SidecarPrints struct {
	Sets      []PrintSet
	Uncovered time.Time
}

// PrintSet is the fingerprints of the hashes a partition stored from Since
// to Until (both included): the first 4 bytes of each hash, concatenated,
// in no order.
type PrintSet struct {
	Since, Until time.Time
	Prints       []byte
}

// PopState says why a partition pop returned what it returned.
type PopState int

// The pop states.
const (
	// PopDelivered: messages were returned, every one above the cursor
	// that is visible now (PopCut when more are).
	PopDelivered PopState = iota
	// PopEmpty: nothing above the group's cursor; the partition is drained
	// for the group until the next push.
	PopEmpty
	// PopBusy: a live lease of another consumer holds the partition for the
	// group, or another request is popping or acking it right now.
	PopBusy
	// PopNotYet: messages exist above the cursor but are not visible yet
	// (delayedProcessing, windowBuffer), or are all leased.
	PopNotYet
	// PopUnreached: a pop of several partitions spent its batch, its reply
	// bytes or its partition count (PopPartitions' most) before it came to
	// this one, so it claimed nothing here; the partition may hold
	// messages, and a wildcard pop tries it first next time.
	PopUnreached
	// PopCut: messages were returned, and the pop's batch or reply bytes
	// (or the row's bisection) ended before the partition's messages did:
	// more are stored above them (visible, or with their visibility
	// unknown when the batch ended at the last one read). A wildcard pop
	// of several partitions tries it first again once its lease ends.
	PopCut
)

// PopSpec is one partition pop.
type PopSpec struct {
	PartitionID uuid.UUID
	Group       string
	// Batch is the most messages returned (>= 1).
	Batch   int
	AutoAck bool
	// SkipLocked makes a pop skip a consumer row another request holds
	// (wildcard pops) instead of waiting for it.
	SkipLocked bool
	// SubscriptionFrom / SubscriptionNew record the group's subscription of
	// the queue on its first pop (PopRequest).
	SubscriptionFrom *time.Time
	SubscriptionNew  bool
	// LeaseID, when not uuid.Nil, is the lease id to take instead of a new
	// one: a multi-partition pop leases every partition it claims under one
	// id, so one extension renews them all (PopRequest.Partitions).
	LeaseID uuid.UUID
	// MaxBytes bounds the bytes returned, each message counted as its
	// payload and its producer (Message.ProducerSub) plus
	// PopMessageOverhead (the first message is always
	// returned unless BytesStrict); <= 0 means MaxPopReplyBytes. It
	// keeps a reply of large messages below the NATS max_payload (SPEC.md §11).
	MaxBytes int
	// BytesStrict makes MaxBytes bind the first message too (a
	// multi-partition pop's later claims): when it does not fit, nothing is
	// returned or leased (PopNotYet).
	BytesStrict bool
}

// PopMessageOverhead is what one message adds to a pop reply besides its
// payload (ids, names, offsets and keys), counted against PopSpec.MaxBytes.
const PopMessageOverhead = 512

// PopMessageBytes is what one message counts against PopSpec.MaxBytes: its
// payload (payload bytes), its producer's identity (Message.ProducerSub,
// nil: none) and PopMessageOverhead.
func PopMessageBytes(payload int, producer *string) int {
	n := payload + PopMessageOverhead
	if producer != nil {
		n += len(*producer)
	}
	return n
}

// Join adds span, the messages claimed at one partition of a
// multi-partition pop (PopRequest.Partitions), to r and returns what they
// count against PopSpec.MaxBytes (PopMessageBytes): the first span joined
// gives r its names (Queue, Partition, PartitionID, ConsumerGroup), later
// ones add their messages. A span without messages changes nothing.
func (r *PopResult) Join(span PopResult) int {
	n := 0
	for i := range span.Messages {
		n += PopMessageBytes(len(span.Messages[i].Data), span.Messages[i].ProducerSub)
	}
	if len(r.Messages) == 0 {
		*r = span
	} else {
		r.Messages = append(r.Messages, span.Messages...)
	}
	return n
}

// LeaseStats counts what a store settled of expired leases (SPEC.md §4,
// rules.Bisection) in committed pops, acks and transactions, since it was
// opened: for the consume report and /metrics.
type LeaseStats struct {
	// Expiries is expired leases settled that still held unacked messages.
	Expiries int64
	// Bisections is those whose span held several unacked messages: none
	// was charged and the next deliveries were bisected.
	Bisections int64
	// DeadLettered is single-message expiries that dead-lettered their
	// message (error text LeaseExpiredError).
	DeadLettered int64
	// Stalls is bisections that ended (the cursor passed the expired
	// range), and StallSeconds the seconds they held their partitions,
	// each from the settling of its first expiry to the pop that found the
	// range passed (PostgreSQL's clock).
	Stalls       int64
	StallSeconds float64
}

// Add adds o's counts to l.
func (l *LeaseStats) Add(o LeaseStats) {
	l.Expiries += o.Expiries
	l.Bisections += o.Bisections
	l.DeadLettered += o.DeadLettered
	l.Stalls += o.Stalls
	l.StallSeconds += o.StallSeconds
}

// LeaseExpiredError is the error text of a failed delivery counted for an
// expired lease, and of the dead letter it may cause (SPEC.md §4).
const LeaseExpiredError = "lease expired"
