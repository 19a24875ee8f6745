package broker

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queen-mq/queen-go/persistence"
	"github.com/queen-mq/queen-go/persistence/pgtest"
)

// TestMigrate: migrations apply once, are idempotent, and brokers (or
// `queen migrate` runs) starting together apply each version exactly once
// (SPEC.md §2).
func TestMigrate(t *testing.T) {
	all, err := persistence.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	if len(all) == 0 {
		t.Fatal("no migrations embedded")
	}
	var versions []int
	for _, m := range all {
		versions = append(versions, m.Version)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	t.Run("twice", func(t *testing.T) {
		url := pgtest.NewDatabase(t)
		first, err := persistence.Migrate(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(first, versions) {
			t.Fatalf("first run applied %v, want %v", first, versions)
		}
		second, err := persistence.Migrate(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		if len(second) != 0 {
			t.Fatalf("second run applied %v, want nothing", second)
		}
		eq(t, int64(len(versions)), countMigrations(t, url), "schema_migrations rows")
	})

	t.Run("concurrent", func(t *testing.T) {
		url := pgtest.NewDatabase(t)
		const n = 4
		applied := make([][]int, n)
		errs := make([]error, n)
		gate := make(chan struct{})
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				<-gate
				applied[i], errs[i] = persistence.Migrate(ctx, url)
			}(i)
		}
		close(gate)
		wg.Wait()
		times := map[int]int{}
		for i := 0; i < n; i++ {
			if errs[i] != nil {
				t.Fatalf("migrator %d: %v", i, errs[i])
			}
			for _, v := range applied[i] {
				times[v]++
			}
		}
		for _, v := range versions {
			eq(t, 1, times[v], "migrators that applied version %d (applied: %v)", v, applied)
		}
		eq(t, len(versions), len(times), "versions applied")
		eq(t, int64(len(versions)), countMigrations(t, url), "schema_migrations rows")

		// The schema is usable: a broker starts on it and pushes.
		e := startEnvOn(t, url, nil)
		for _, via := range transports {
			rs := e.pushOK(t, via, items(it("after-migrate-"+via, "", "m"), it("after-migrate-"+via, "", "m")), 2)
			wantStatuses(t, rs, "queued", "duplicate")
		}
	})
}

func countMigrations(t *testing.T, url string) int64 {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int64
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM queen.schema_migrations`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestOperations: /health, /metrics, unknown queues and routes, and the NATS
// micro service's discovery (SPEC.md §11).
func TestOperations(t *testing.T) {
	e := startEnv(t, nil)
	get := func(t *testing.T, path string) (int, string, http.Header) {
		t.Helper()
		resp, err := e.hc.Get(e.base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(b), resp.Header
	}

	t.Run("health", func(t *testing.T) {
		st, body, _ := get(t, "/health")
		eq(t, http.StatusOK, st, "status")
		var h map[string]any
		if err := json.Unmarshal([]byte(body), &h); err != nil {
			t.Fatalf("health body %q: %v", body, err)
		}
		eq(t, "healthy", h["status"], "health status")
		// The build (SPEC.md §2): new fields beside the old ones.
		eq(t, Release, h["release"], "health release")
		eq(t, "unknown", h["revision"], "health revision (a test binary records none)")
		eq(t, float64(persistence.SchemaVersion()), h["schema"], "health schema")
		eq(t, float64(persistence.LayoutGeneration()), h["layout"], "health layout")
	})

	t.Run("metrics", func(t *testing.T) {
		for _, via := range transports {
			e.pushOK(t, via, items(it("metrics-"+via, "", "m1"), it("metrics-"+via, "", "m1")), 2)
		}
		st, body, _ := get(t, "/metrics")
		eq(t, http.StatusOK, st, "status")
		for _, want := range []string{
			"queen_push_items_total",
			`queen_push_items_total{verdict="queued"} 2`,
			`queen_push_items_total{verdict="duplicate"} 2`,
			"queen_push_commit_seconds",
			"queen_push_commit_seconds_bucket",
			`queen_push_requests_total{transport="http"} 1`,
			`queen_push_requests_total{transport="nats"} 1`,
		} {
			if !strings.Contains(body, want) {
				t.Errorf("/metrics lacks %q", want)
			}
		}
	})

	t.Run("unknown_queue", func(t *testing.T) {
		for _, via := range transports {
			st, _, eb := e.getQueue(t, via, "never-created-"+via)
			eq(t, http.StatusNotFound, st, "%s status", via)
			eq(t, "not_found", eb.Code, "%s code", via)
		}
		// A known queue is found, with its counts.
		e.pushOK(t, "http", items(it("known", "a", "1"), it("known", "b", "2")), 2)
		for _, via := range transports {
			st, m, _ := e.getQueue(t, via, "known")
			eq(t, http.StatusOK, st, "%s status", via)
			eq(t, "known", m["name"], "name")
			eq(t, float64(2), m["partitions"], "partitions")
			eq(t, float64(2), m["messages"], "messages")
		}
	})

	t.Run("unknown_route", func(t *testing.T) {
		st, body, _ := get(t, "/api/v1/nope")
		eq(t, http.StatusNotFound, st, "status")
		if !strings.Contains(body, `"not_found"`) {
			t.Fatalf("body %s", body)
		}
	})

	t.Run("nats_micro_service", func(t *testing.T) {
		msg, err := e.nc.Request("$SRV.INFO.queen", nil, 10*time.Second)
		if err != nil {
			t.Fatalf("$SRV.INFO.queen: %v", err)
		}
		var info struct {
			Name      string `json:"name"`
			Endpoints []struct {
				Subject    string `json:"subject"`
				QueueGroup string `json:"queue_group"`
			} `json:"endpoints"`
		}
		if err := json.Unmarshal(msg.Data, &info); err != nil {
			t.Fatal(err)
		}
		eq(t, "queen", info.Name, "service name")
		var subjects []string
		for _, ep := range info.Endpoints {
			subjects = append(subjects, ep.Subject)
			eq(t, "queen", ep.QueueGroup, "queue group of %s", ep.Subject)
		}
		sort.Strings(subjects)
		for _, want := range []string{"queen.v1.configure", "queen.v1.push"} {
			i := sort.SearchStrings(subjects, want)
			if i == len(subjects) || subjects[i] != want {
				t.Errorf("endpoint %s missing from %v", want, subjects)
			}
		}
	})
}
