package broker

// End-to-end retention (SPEC.md §7): the broker's retention loop deletes
// segments and purges the sidecar on its own; rows are made old by moving
// their created_at back (tests only), and the tests poll with deadlines.

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/actors"
	"github.com/queen-mq/queen-go/persistence"
)

// retentionEnv starts a broker whose retention loop runs every 20 ms with
// the sidecar floor lowered to 1 s (QUEEN_TEST_TXNS_FLOOR).
func retentionEnv(t *testing.T) *env {
	t.Helper()
	return startEnv(t, func(c *Config) {
		c.Retention = persistence.RetentionConfig{Interval: 20 * time.Millisecond, TxnsFloor: time.Second}
	})
}

// ageQueue moves the created_at of a queue's segments and sidecar rows back
// by d (persistence.Store.AgePartitions).
func (e *env) ageQueue(t testing.TB, queue string, d time.Duration) {
	t.Helper()
	pids := queuePartitions(t, e.db, queue)
	err := actors.Age([]*actors.Cache{e.b.cache}, pids, d, func() error {
		return e.b.store.AgePartitions(context.Background(), pids, d)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// queuePartitions returns the ids of a queue's partitions.
func queuePartitions(t testing.TB, db *pgxpool.Pool, queue string) []uuid.UUID {
	t.Helper()
	rows, err := db.Query(context.Background(), `SELECT p.id FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id WHERE q.name = $1`, queue)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func TestRetentionLoopDeletesAndDuplicatesKeepTheZeroID(t *testing.T) {
	t.Parallel()
	e := retentionEnv(t)
	e.configureOK(t, "http", []byte(`{"queue":"ret","options":{"retentionSeconds":60}}`)) // window 3600 s
	orig := e.pushOK(t, "http", items(it("ret", "p", "m1"), it("ret", "p", "m2")), 2)
	wantStatuses(t, orig, "queued", "queued")
	e.ageQueue(t, "ret", 120*time.Second)
	eventually(t, 20*time.Second, 10*time.Millisecond, "the loop deletes the old segment", func() (bool, string) {
		s := e.stats(t, "ret")
		return s.Segments == 0, "segments " + itoa(s.Segments)
	})
	if s := e.stats(t, "ret"); s.SidecarSegments != 1 || s.Hashes != 2 {
		t.Fatalf("the sidecar entries are inside the window and stay: %+v", s)
	}
	for _, via := range transports {
		got := e.pushOK(t, via, items(it("ret", "p", "m1")), 1)
		wantStatuses(t, got, "duplicate")
		eq(t, zeroUUID, got[0].MessageID, "a duplicate of a retained-away original via %s", via)
		eq(t, orig[0].PartitionID, got[0].PartitionID, "partition id")
	}
	if s := e.stats(t, "ret"); s.Segments != 0 || s.LastOffsets != 2 || s.SidecarSegments != 1 {
		t.Fatalf("a duplicate writes nothing: %+v", s)
	}
}

func TestRetentionLoopPurgesTheSidecar(t *testing.T) {
	t.Parallel()
	e := retentionEnv(t)
	e.configureOK(t, "http", []byte(`{"queue":"side","options":{"dedupWindowSeconds":30}}`))
	orig := e.pushOK(t, "http", items(it("side", "p", "m1"), it("side", "p", "m2")), 2)
	pid := orig[0].PartitionID
	e.ageQueue(t, "side", 10*time.Second) // inside the window (30 s), past the floor (1 s)
	if s := e.stats(t, "side"); s.SidecarSegments != 1 {
		t.Fatalf("purged inside the window: %+v", s)
	}
	e.ageQueue(t, "side", 60*time.Second)
	eventually(t, 20*time.Second, 10*time.Millisecond, "the loop purges the sidecar", func() (bool, string) {
		s := e.stats(t, "side")
		return s.SidecarSegments == 0 && s.Hashes == 0, "sidecar entries " + itoa(s.Hashes)
	})
	if s := e.stats(t, "side"); s.Segments != 1 || s.Messages != 2 {
		t.Fatalf("the segment stays (no retentionSeconds): %+v", s)
	}
	// Acks by transactionId no longer resolve; by offset they do.
	res := ackBatch(t, e, "", map[string]any{"partitionId": pid, "transactionId": "m2"})
	if res[0].Result != queen.Unresolvable || res[0].Success {
		t.Fatalf("ack by a purged transactionId: %+v", res[0])
	}
	res = ackBatch(t, e, "", map[string]any{"partitionId": pid, "offset": 1})
	if res[0].Result != queen.Acked {
		t.Fatalf("ack by offset: %+v", res[0])
	}
	// A repeat of a purged id is a new message.
	again := e.pushOK(t, "nats", items(it("side", "p", "m1")), 1)
	wantStatuses(t, again, "queued")
	if again[0].MessageID == orig[0].MessageID {
		t.Fatalf("the repeat got the original's id %s", again[0].MessageID)
	}
}

func TestRetentionLoopStopsWithTheBroker(t *testing.T) {
	t.Parallel()
	e := retentionEnv(t)
	count := func() int64 {
		var n int64
		if err := e.db.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE application_name = 'queen-retention' AND datname = current_database()`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	eventually(t, 20*time.Second, 10*time.Millisecond, "the loop connects", func() (bool, string) {
		n := count()
		return n == 1, "sessions " + itoa(n)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.b.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	eventually(t, 20*time.Second, 10*time.Millisecond, "the loop's session ends with the broker", func() (bool, string) {
		n := count()
		return n == 0, "sessions " + itoa(n)
	})
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
