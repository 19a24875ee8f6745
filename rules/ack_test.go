package rules

import (
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	queen "github.com/queen-mq/queen-go"
)

func TestAck(t *testing.T) {
	lease := uuid.MustParse("0192f0c4-0000-7000-8000-000000000001")
	other := uuid.MustParse("0192f0c4-0000-7000-8000-000000000002")
	to := func(n int64) *int64 { return &n }
	// row is a live lease over offsets 0..9 with nothing consumed.
	row := func(mod ...func(*ConsumerRow)) ConsumerRow {
		r := ConsumerRow{Partition: "p", Group: "g", Cursor: -1, Lease: lease, HasLease: true, Live: true, LeaseTo: to(9), RetryLimit: 2}
		for _, m := range mod {
			m(&r)
		}
		return r
	}
	c := func(off int64) AckTarget { return AckTarget{Offset: off, Status: queen.AckCompleted} }
	f := func(off int64) AckTarget { return AckTarget{Offset: off, Status: queen.AckFailed, Error: "boom"} }
	ok := func(r queen.AckOutcome) AckVerdict { return AckVerdict{Result: r, Success: true} }
	notApplied := func(stop int64) AckVerdict {
		return AckVerdict{Result: queen.RetryScheduled, Error: "not applied: a failure at the lower offset " +
			itoa(stop) + " in the same call stops the cursor below it; the message will be delivered again"}
	}

	for _, tc := range []struct {
		name    string
		row     ConsumerRow
		targets []AckTarget
		want    AckDecision
	}{{
		name:    "completed moves the cursor, the lease stays below its last offset",
		row:     row(),
		targets: []AckTarget{c(1), c(0), c(2)},
		want: AckDecision{Verdicts: []AckVerdict{ok(queen.Acked), ok(queen.Acked), ok(queen.Acked)},
			Cursor: 2, KeepLease: true, FailCounts: map[int64]int32{}},
	}, {
		name:    "the lease ends when the cursor reaches its last offset",
		row:     row(),
		targets: []AckTarget{c(9)},
		want:    AckDecision{Verdicts: []AckVerdict{ok(queen.Acked)}, Cursor: 9, FailCounts: map[int64]int32{}},
	}, {
		name:    "an expired lease is not kept",
		row:     row(func(r *ConsumerRow) { r.Live = false }),
		targets: []AckTarget{c(0)},
		want:    AckDecision{Verdicts: []AckVerdict{ok(queen.Acked)}, Cursor: 0, FailCounts: map[int64]int32{}},
	}, {
		name:    "at or below the cursor is stale",
		row:     row(func(r *ConsumerRow) { r.Cursor = 4 }),
		targets: []AckTarget{c(4), f(3), c(5)},
		want: AckDecision{Verdicts: []AckVerdict{ok(queen.Stale), ok(queen.Stale), ok(queen.Acked)},
			Cursor: 5, KeepLease: true, FailCounts: map[int64]int32{}},
	}, {
		name: "a lease that is not the live one",
		row:  row(),
		targets: []AckTarget{{Offset: 0, Status: queen.AckCompleted, LeaseID: &other},
			{Offset: 1, Status: queen.AckCompleted, LeaseID: &lease}},
		want: AckDecision{Verdicts: []AckVerdict{
			{Result: queen.LeaseInvalid, Error: `lease ` + other.String() + ` is not the live lease of partition p for group "g"`},
			ok(queen.Acked)}, Cursor: 1, KeepLease: true, FailCounts: map[int64]int32{}},
	}, {
		name:    "the right lease id, expired",
		row:     row(func(r *ConsumerRow) { r.Live = false }),
		targets: []AckTarget{{Offset: 0, Status: queen.AckCompleted, LeaseID: &lease}},
		want: AckDecision{Verdicts: []AckVerdict{
			{Result: queen.LeaseInvalid, Error: `lease ` + lease.String() + ` is not the live lease of partition p for group "g"`}},
			Cursor: -1, FailCounts: map[int64]int32{}},
	}, {
		name:    "the first failure stops the sweep and ends the lease",
		row:     row(),
		targets: []AckTarget{c(0), f(1), c(2), {Offset: 3, Status: queen.AckRetry}},
		want: AckDecision{Verdicts: []AckVerdict{ok(queen.Acked), ok(queen.RetryScheduled), notApplied(1), ok(queen.RetryScheduled)},
			Cursor: 0, FailCounts: map[int64]int32{1: 1}},
	}, {
		name:    "a batch nack counts every failed message once",
		row:     row(func(r *ConsumerRow) { r.FailCounts = map[int64]int32{2: 1} }),
		targets: []AckTarget{f(2), f(1), f(2), f(0)},
		want: AckDecision{Verdicts: []AckVerdict{ok(queen.RetryScheduled), ok(queen.RetryScheduled), ok(queen.RetryScheduled), ok(queen.RetryScheduled)},
			Cursor: -1, FailCounts: map[int64]int32{0: 1, 1: 1, 2: 2}},
	}, {
		name:    "failed past retryLimit is dead-lettered and passed",
		row:     row(func(r *ConsumerRow) { r.FailCounts = map[int64]int32{0: 2, 5: 1} }),
		targets: []AckTarget{f(0), c(1)},
		want: AckDecision{Verdicts: []AckVerdict{ok(queen.DeadLettered), ok(queen.Acked)},
			Cursor: 1, FailCounts: map[int64]int32{5: 1}, DeadLetters: []DeadLetter{{Offset: 0, Error: "boom", Attempts: 3}}},
	}, {
		name: "dlq dead-letters at once, once per offset",
		row:  row(func(r *ConsumerRow) { r.FailCounts = map[int64]int32{0: 1} }),
		targets: []AckTarget{{Offset: 0, Status: queen.AckDLQ, Error: "poison"}, {Offset: 0, Status: queen.AckDLQ, Error: "again"},
			{Offset: 1, Status: queen.AckDLQ}},
		want: AckDecision{Verdicts: []AckVerdict{ok(queen.DeadLettered), ok(queen.DeadLettered), ok(queen.DeadLettered)},
			Cursor: 1, FailCounts: map[int64]int32{},
			DeadLetters: []DeadLetter{{Offset: 0, Error: "poison", Attempts: 2}, {Offset: 1, Attempts: 1}}},
	}, {
		name:    "a completed at the offset of the stopping failure is not applied",
		row:     row(),
		targets: []AckTarget{f(3), c(3)},
		want: AckDecision{Verdicts: []AckVerdict{ok(queen.RetryScheduled),
			{Result: queen.RetryScheduled, Error: "not applied: the same call failed offset 3"}},
			Cursor: -1, FailCounts: map[int64]int32{3: 1}},
	}, {
		name:    "no lease, no targets",
		row:     row(func(r *ConsumerRow) { r.HasLease, r.Lease, r.LeaseTo = false, uuid.Nil, nil }),
		targets: nil,
		want:    AckDecision{Verdicts: []AckVerdict{}, Cursor: -1, FailCounts: map[int64]int32{}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var before map[int64]int32
			if tc.row.FailCounts != nil {
				before = map[int64]int32{}
				for k, v := range tc.row.FailCounts {
					before[k] = v
				}
			}
			got := Ack(tc.row, tc.targets)
			require.Equal(t, tc.want, got)
			if before != nil {
				require.Equal(t, before, tc.row.FailCounts, "the row's counts are not modified")
			}
		})
	}
}

func itoa(n int64) string { return fmt.Sprint(n) }
