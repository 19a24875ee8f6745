package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// healthOf reads e's GET /health: the status code and the body's fields.
func (e *env) healthOf(t testing.TB) (int, map[string]any) {
	t.Helper()
	st, body := e.httpDo(t, http.MethodGet, "/health", nil)
	var h map[string]any
	if err := json.Unmarshal(body, &h); err != nil {
		t.Fatalf("/health body %s: %v", clip(body), err)
	}
	return st, h
}

// TestNATSOutageInACluster (issue 38): two brokers on one database and one
// external NATS server. While the server is down a push entering at broker
// a for a partition broker b owns is answered at once 503 with the item
// failed nats_unavailable (not the hop's timeout after seconds, the hop is
// never sent), a push for a partition a owns is stored, and both brokers'
// /health answer 200 "degraded" with "nats":"reconnecting". When NATS
// returns on its port /health is healthy again and the refused item, pushed
// again with its transaction id, is stored once.
func TestNATSOutageInACluster(t *testing.T) {
	t.Parallel()
	opts := &server.Options{Host: "127.0.0.1", Port: -1, NoSigs: true, NoLog: true}
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	t.Cleanup(func() { ns.Shutdown() }) // the server running at the end
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("NATS not ready")
	}
	url := ns.ClientURL()
	opts.Port = ns.Addr().(*net.TCPAddr).Port

	lease := 2 * time.Second
	a := startEnv(t, func(c *Config) { c.NATSURL = url; c.ShardLease = lease })
	b := startEnvOn(t, a.url, func(c *Config) { c.NATSURL = url; c.ShardLease = lease })
	envs := []*env{a, b}
	eventually(t, 30*time.Second, 20*time.Millisecond, "two brokers share the shards", func() (bool, string) { return settled(t, envs, 1) })
	remote, rshard := partitionOwnedBy(t, b, "outage", "b")
	local, _ := partitionOwnedBy(t, a, "outage", "a")
	if a.b.members.RemoteOwner(rshard) == "" {
		t.Fatalf("broker a does not route shard %d to b", rshard)
	}
	for _, e := range envs {
		if st, h := e.healthOf(t); st != http.StatusOK || h["status"] != "healthy" || h["nats"] != "ok" || h["storage"] != "ok" {
			t.Fatalf("/health before the outage: %d %v", st, h)
		}
	}
	a.pushOK(t, "http", items(it("outage", remote, "before")), 1)

	ns.Shutdown()
	ns.WaitForShutdown()
	for _, e := range envs {
		eventually(t, 30*time.Second, 5*time.Millisecond, "/health degraded", func() (bool, string) {
			st, h := e.healthOf(t)
			return st == http.StatusOK && h["status"] == "degraded" && h["nats"] == "reconnecting" && h["database"] == "ok", fmt.Sprintf("%d %v", st, h)
		})
	}
	r := a.pushR(t, "http", items(it("outage", remote, "during")))
	if r.Status != http.StatusServiceUnavailable || len(r.Items) != 1 || r.Items[0].Status != "failed" || r.Items[0].Code != "nats_unavailable" {
		t.Fatalf("push for b's shard during the outage: %d %s, want 503 with the item failed nats_unavailable", r.Status, clip(r.Raw))
	}
	if r.Header.Get("Retry-After") == "" {
		t.Fatalf("503 without Retry-After")
	}
	if got := a.b.router.Stats().Unreachable; got == 0 {
		t.Fatalf("router unreachable count %d", got)
	}
	wantStatuses(t, a.pushOK(t, "http", items(it("outage", local, "here")), 1), "queued")

	ns, err = server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	ns.Start() // shut down by the first cleanup, after the brokers stopped
	for _, e := range envs {
		eventually(t, 30*time.Second, 5*time.Millisecond, "/health healthy again", func() (bool, string) {
			st, h := e.healthOf(t)
			return st == http.StatusOK && h["status"] == "healthy" && h["nats"] == "ok", fmt.Sprintf("%d %v", st, h)
		})
	}
	// b serves its shards again once its subscriptions are back.
	eventually(t, 30*time.Second, 20*time.Millisecond, "the retry stored", func() (bool, string) {
		r := a.pushR(t, "http", items(it("outage", remote, "during")))
		return r.Status == http.StatusCreated && r.Items[0].Status == "queued", fmt.Sprintf("%d %s", r.Status, clip(r.Raw))
	})
	if n := txnCounts(a.frames(t, "outage", remote)); n["during"] != 1 || n["before"] != 1 {
		t.Fatalf("stored in b's partition: %v, want before and during once each", n)
	}
}

// TestFullDiskAnswersStorageFull (issue 38): with the database refusing
// writes for lack of space (a trigger raising SQLSTATE 53100 as "could not
// extend file ...: No space left on device" does) a push is answered 503
// with its item failed storage_full, saying the database is out of disk
// space, and /health answers 200 "degraded" with "storage":"full"; once
// space is freed the same transaction id is stored.
func TestFullDiskAnswersStorageFull(t *testing.T) {
	t.Parallel()
	e := startEnv(t, nil)
	e.pushOK(t, "http", items(it("full", "p", "a")), 1)
	ctx := context.Background()
	for _, q := range []string{
		`CREATE FUNCTION public.test_disk_full() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'could not extend file "base/16384/24576": No space left on device' USING ERRCODE = 'disk_full';
END $$`,
		`CREATE TRIGGER test_disk_full BEFORE UPDATE ON queen.partition_ends FOR EACH ROW EXECUTE FUNCTION public.test_disk_full()`,
	} {
		if _, err := e.db.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	for _, via := range []string{"http", "nats"} {
		r := e.pushR(t, via, items(it("full", "p", "b")))
		if r.Status != http.StatusServiceUnavailable || len(r.Items) != 1 || r.Items[0].Code != "storage_full" || !strings.Contains(r.Items[0].Error, "out of disk space") {
			t.Fatalf("push via %s on a full disk: %d %s, want 503 with the item failed storage_full", via, r.Status, clip(r.Raw))
		}
	}
	if st, h := e.healthOf(t); st != http.StatusOK || h["status"] != "degraded" || h["storage"] != "full" || h["database"] != "ok" {
		t.Fatalf("/health on a full disk: %d %v", st, h)
	}
	if _, err := e.db.Exec(ctx, `DROP TRIGGER test_disk_full ON queen.partition_ends`); err != nil {
		t.Fatal(err)
	}
	wantStatuses(t, e.pushOK(t, "http", items(it("full", "p", "b")), 1), "queued")
}
