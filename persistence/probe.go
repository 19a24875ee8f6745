// The window probe of a bundle (SPEC.md §3, §8): what it sends
// (probeArgs, bundle_probe.sql), what it reads back (the hits), and the
// originals a duplicate echoes.

package persistence

import (
	"bytes"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	queen "github.com/queen-mq/queen-go"
)

// pgSince and pgUntil give the span's ends as timestamptz, an unbounded
// end as -infinity or infinity.
func pgSince(sp queen.Span) pgtype.Timestamptz {
	if sp.Since.IsZero() {
		return pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}
	}
	return pgtype.Timestamptz{Time: sp.Since, Valid: true}
}

func pgUntil(sp queen.Span) pgtype.Timestamptz {
	if sp.Until.IsZero() {
		return pgtype.Timestamptz{InfinityModifier: pgtype.Infinity, Valid: true}
	}
	return pgtype.Timestamptz{Time: sp.Until, Valid: true}
}

// probeArgs gathers bundle_probe's parallel arrays for the partitions of a
// bundle or a transaction, one partition at a time (add), in the order
// their rows are locked.
//
// A partition the cache vouches for (idle: a watermark, a window assumed,
// no suspect) is not sent: under its row lock it needs no lookup unless its
// allocator moved past the watermark (another writer) or its queue's window
// is now wider than the cache assumed, and the first round trip tells both
// (bundle_lock's ends, the probe's queue rows). rest gathers those for a
// second probe. Spread traffic is mostly idle partitions: a probe row each
// cost about as much as the lookups of the rest (issue 42).
type probeArgs struct {
	pids, hashes []pgtype.UUID
	wms, assumed []int64
	lo, hi       []int32
	suspect      []bool
	since, until []pgtype.Timestamptz
	queues       []string
	// names is the distinct queues of every partition added, idle or not:
	// the probe reads their windows.
	names []string
	idle  []idlePartition
}

// idlePartition is a partition probeArgs.add kept out of the probe.
type idlePartition struct {
	b           *queen.PushBatch
	wm, assumed int64
}

// add gathers b's partition: its leaders' hashes (b.Suspects marks the
// cache's suspects, with the span each was seen in), looked up above
// offset wm (-1: the whole window) under the window the cache assumed
// (seconds; 0: none). A partition with wm >= 0, assumed > 0 and no suspect
// is kept idle.
func (p *probeArgs) add(b *queen.PushBatch, wm, assumed int64) {
	q := b.Items[0].Queue
	if !slices.Contains(p.names, q) {
		p.names = append(p.names, q)
	}
	if wm >= 0 && assumed > 0 && !anySuspect(b) {
		p.idle = append(p.idle, idlePartition{b: b, wm: wm, assumed: assumed})
		return
	}
	p.send(b, wm, assumed)
}

// send puts b's partition in the probe's arrays.
func (p *probeArgs) send(b *queen.PushBatch, wm, assumed int64) {
	lo := len(p.hashes) + 1
	for j, it := range b.Items {
		if leaderOf(b, j) == j {
			p.hashes = append(p.hashes, pgUUID(it.Hash))
			sp, sus := b.Suspects[it.Hash]
			p.suspect = append(p.suspect, sus)
			p.since = append(p.since, pgSince(sp))
			p.until = append(p.until, pgUntil(sp))
		}
	}
	p.pids = append(p.pids, pgUUID(b.PartitionID))
	p.queues = append(p.queues, b.Items[0].Queue)
	p.wms = append(p.wms, wm)
	p.assumed = append(p.assumed, assumed)
	p.lo = append(p.lo, int32(lo))
	p.hi = append(p.hi, int32(len(p.hashes)))
}

// anySuspect reports whether one of b's leaders is a suspect of the cache.
func anySuspect(b *queen.PushBatch) bool {
	if len(b.Suspects) == 0 {
		return false
	}
	for j, it := range b.Items {
		if _, sus := b.Suspects[it.Hash]; sus && leaderOf(b, j) == j {
			return true
		}
	}
	return false
}

// rest gathers, after the first probe (locked holds each partition's end
// and window), the idle partitions that need a lookup after all: their end
// is past the watermark (a write the cache has not seen), or their window
// is wider than the cache assumed. nil when there are none (the usual
// case).
func (p *probeArgs) rest(locked map[[16]byte]lockedPartition) *probeArgs {
	var r *probeArgs
	for _, ip := range p.idle {
		lp, held := locked[ip.b.PartitionID]
		if !held || lp.window <= 0 || (lp.last <= ip.wm && lp.window <= ip.assumed) {
			continue
		}
		if r == nil {
			r = &probeArgs{names: p.names}
		}
		r.send(ip.b, ip.wm, ip.assumed)
	}
	return r
}

// queue queues on pb the window probe of the partitions gathered
// (bundle_probe, between probe_plan_begin and plan_end); its rows give each
// locked partition its queue's window and options and fill hits (scan).
func (p *probeArgs) queue(pb *pgx.Batch, locked map[[16]byte]lockedPartition, hits map[[16]byte]map[queen.Hash]hit) {
	pb.Queue(sqlProbePlanBegin)
	pb.Queue(sqlBundleProbe, p.pids, p.hashes, p.wms, p.lo, p.hi, p.suspect, p.assumed, p.since, p.until, p.queues, p.names).Query(p.scan(locked, hits))
	pb.Queue(sqlPlanEnd)
}

type hit struct {
	offset int64
	id     uuid.UUID
	// segment is the first offset of the segment holding the original.
	segment int64
}

// segmentKey names one segment: partition id and first offset.
type segmentKey struct {
	partition [16]byte
	first     int64
}

// wantOriginals adds to want the segments holding the originals of b's
// duplicates that were not written in this batch (a follower of a queued
// leader is compared with the leader's payload, no read), for a queue with
// dedupCheckPayload (SPEC.md §6). Originals whose segment is gone (ZeroUUID)
// are not compared.
func wantOriginals(b *queen.PushBatch, out *queen.PushOutcome, hits map[queen.Hash]hit, want map[segmentKey]struct{}) {
	for i, r := range out.Results {
		if r.Verdict != queen.Duplicate || out.Results[leaderOf(b, i)].Verdict == queen.Queued {
			continue
		}
		if h, ok := hits[b.Items[i].Hash]; ok && h.id != queen.ZeroUUID {
			want[segmentKey{b.PartitionID, h.segment}] = struct{}{}
		}
	}
}

// queueOriginals queues bundle_originals for the segments in want (nothing
// when want is empty); its rows fill originals with each segment's packed
// frames, decompressed once here (a segment that does not decode is left
// out: its duplicates stay unmarked).
func queueOriginals(pb *pgx.Batch, want map[segmentKey]struct{}, originals map[segmentKey][]byte) {
	if len(want) == 0 {
		return
	}
	pids := make([]pgtype.UUID, 0, len(want))
	firsts := make([]int64, 0, len(want))
	for k := range want {
		pids = append(pids, pgUUID(k.partition))
		firsts = append(firsts, k.first)
	}
	pb.Queue(sqlBundleOriginals, pids, firsts).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var k segmentKey
			var frames []byte
			if err := rows.Scan(&k.partition, &k.first, &frames); err != nil {
				return err
			}
			if frames, err := unpackSegment(frames, nil); err == nil {
				originals[k] = frames
			}
		}
		return rows.Err()
	})
}

// markMismatches sets PayloadMismatch on every duplicate of a partition whose
// queue has dedupCheckPayload on (in locked; their leaders' originals were read into
// originals, or were written by this batch) when its payload bytes differ
// from the original's as stored (SPEC.md §6). Payloads are stored as the
// client's JSON text, so the comparison is of that text. A duplicate whose
// original could not be read is left unmarked.
func markMismatches(bs []*queen.PushBatch, outs []queen.PushOutcome, locked map[[16]byte]lockedPartition, hits map[[16]byte]map[queen.Hash]hit, originals map[segmentKey][]byte) {
	for n, b := range bs {
		if !locked[b.PartitionID].checkPayload {
			continue
		}
		out := &outs[n]
		for i := range out.Results {
			r := &out.Results[i]
			if r.Verdict != queen.Duplicate {
				continue
			}
			var orig []byte
			if l := leaderOf(b, i); out.Results[l].Verdict == queen.Queued {
				orig = b.Items[l].Payload
			} else {
				h, ok := hits[b.PartitionID][b.Items[i].Hash]
				if !ok {
					continue
				}
				frames, ok := originals[segmentKey{b.PartitionID, h.segment}]
				if !ok {
					continue
				}
				p, err := FramePayload(frames, int(h.offset-h.segment))
				if err != nil {
					continue
				}
				orig = p
			}
			r.PayloadMismatch = !bytes.Equal(orig, b.Items[i].Payload)
		}
	}
}

// scan reads bundle_probe's rows (pushes and transactions): each queue's
// window row gives every locked partition of that queue (in p) its window,
// payload option and retention; each hit goes to hits (the lowest offset
// of a hash per partition is its original). A partition whose queue has no
// row (deleted) keeps window -1.
func (p *probeArgs) scan(locked map[[16]byte]lockedPartition, hits map[[16]byte]map[queen.Hash]hit) func(pgx.Rows) error {
	return func(rows pgx.Rows) error {
		windows := map[string]queueWindow{}
		for rows.Next() {
			var pid, k pgtype.UUID
			var seconds *int64
			var off *int64
			var mid []byte
			var check *bool
			var seg *int64
			var retained *bool
			var queue *string
			var created *time.Time
			if err := rows.Scan(&pid, &seconds, &k, &off, &mid, &check, &seg, &retained, &queue, &created); err != nil {
				return err
			}
			if queue != nil { // a queue's window row, applied below
				if seconds != nil {
					windows[*queue] = queueWindow{seconds: *seconds, check: check != nil && *check, retained: retained != nil && *retained}
				}
				continue
			}
			m := hits[pid.Bytes]
			if m == nil {
				m = map[queen.Hash]hit{}
				hits[pid.Bytes] = m
			}
			if old, ok := m[k.Bytes]; ok && old.offset < *off {
				continue // the lowest offset is the original
			}
			var at time.Time
			if created != nil {
				at = *created
			}
			h := hit{offset: *off, id: originalID(uuid.UUID(pid.Bytes), *off, at, mid)}
			if seg != nil {
				h.segment = *seg
			}
			m[k.Bytes] = h
		}
		if err := rows.Err(); err != nil {
			return err
		}
		// One pass over the partitions, whatever the number of queues.
		apply := func(pid [16]byte, q string) {
			w, ok := windows[q]
			lp, held := locked[pid]
			if !ok || !held {
				return
			}
			lp.window, lp.checkPayload, lp.retained = w.seconds, w.check, w.retained
			locked[pid] = lp
		}
		for i, q := range p.queues {
			apply(p.pids[i].Bytes, q)
		}
		for _, ip := range p.idle {
			apply(ip.b.PartitionID, ip.b.Items[0].Queue)
		}
		return nil
	}
}

// queueWindow is a queue's window row of bundle_probe: its window
// (seconds), dedupCheckPayload and whether it has retentionSeconds.
type queueWindow struct {
	seconds         int64
	check, retained bool
}
