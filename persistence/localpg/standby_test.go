package localpg

import (
	"context"
	"os"
	"testing"
	"time"
)

// TestStandbyFailover (SPEC.md §9): a synchronous standby has every commit
// the primary answered; after the primary is SIGKILLed and the standby
// promoted, a client on the failover URL reaches the new primary by itself
// and writes there.
func TestStandbyFailover(t *testing.T) {
	requireBinaries(t)
	t.Parallel()
	primary := start(t, reachableDir(t))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	standby, err := primary.StartStandby(ctx)
	if err != nil {
		t.Fatalf("StartStandby: %v", err)
	}
	t.Cleanup(func() {
		if err := standby.Stop(); err != nil {
			t.Errorf("standby Stop: %v", err)
		}
		os.RemoveAll(standby.Dir())
	})
	if got := queryString(t, primary.URL(), `SELECT sync_state FROM pg_stat_replication WHERE application_name = 'queen_standby'`); got != "sync" {
		t.Fatalf("sync_state = %q", got)
	}
	if got := queryString(t, standby.URL(), `SELECT pg_is_in_recovery()::text`); got != "true" {
		t.Fatalf("standby in recovery = %q", got)
	}

	url := FailoverURL(primary, standby)
	exec1(t, url, `CREATE TABLE t (n int)`)
	conn := connect(t, url)
	for i := 0; i < 200; i++ {
		if _, err := conn.Exec(ctx, `INSERT INTO t VALUES ($1)`, i); err != nil {
			t.Fatal(err)
		}
	}
	conn.Close(ctx)

	if err := primary.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if err := standby.Promote(ctx); err != nil {
		t.Fatalf("Promote: %v", err)
	}
	// Every answered commit is on the promoted standby.
	if got := queryString(t, url, `SELECT count(*)::text FROM t`); got != "200" {
		t.Fatalf("rows on the promoted standby: %s, want 200", got)
	}
	exec1(t, url, `INSERT INTO t VALUES (200)`)
	if got := queryString(t, standby.URL(), `SELECT count(*)::text FROM t`); got != "201" {
		t.Fatalf("rows after a write on the new primary: %s", got)
	}
}
