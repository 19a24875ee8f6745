package broker

import (
	"encoding/json"
	"fmt"
	"io"
	"testing"
	"time"
)

// TestPassivationKeepsVerdictsOverPostgres: partition actors passivated
// (forced; the idle sweep is an hour away) and reactivated by the next push
// answer exactly as before (SPEC.md §3, §8): a repeat is a duplicate with
// the original's message id, over HTTP and NATS. /metrics and /health count
// active and passivated partitions.
func TestPassivationKeepsVerdictsOverPostgres(t *testing.T) {
	e := startEnv(t, func(c *Config) { c.PartitionIdle = time.Hour })
	first := e.pushOK(t, "http", items(it("pv", "a", "t1"), it("pv", "b", "t1"), it("pv", "a", "t2")), 3)
	for _, r := range first {
		eq(t, "queued", r.Status, "first push")
	}
	eq(t, 2.0, e.metricValue(t, "queen_partitions_active"), "active partitions")

	for round, via := range []string{"http", "nats", "http"} {
		// Asked again until done: an actor that has just answered a push
		// may not have seen its commit end yet, and refuses until then
		// (the idle sweep asks again at its next tick).
		eventually(t, 20*time.Second, 5*time.Millisecond, "every partition passivated", func() (bool, string) {
			ps := e.b.host.PartitionStats()
			if ps.Active != 0 {
				e.b.host.Passivate(0)
			}
			return ps.Active == 0, fmt.Sprintf("%+v", ps)
		})
		eq(t, float64(2*(round+1)), e.metricValue(t, "queen_partitions_passivated_total"), "passivated partitions")
		again := e.pushOK(t, via, items(it("pv", "a", "t2"), it("pv", "b", "t1"), it("pv", "a", "t1"), it("pv", "a", fmt.Sprintf("new%d", round))), 4)
		for i, want := range []string{first[2].MessageID, first[1].MessageID, first[0].MessageID} {
			eq(t, "duplicate", again[i].Status, "round %d item %d", round, i)
			eq(t, want, again[i].MessageID, "round %d item %d: the original's id", round, i)
		}
		eq(t, "queued", again[3].Status, "round %d: a new id", round)
	}

	resp, err := e.hc.Get(e.base + "/health")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var h struct {
		Partitions struct {
			Active     int64   `json:"active"`
			Passivated uint64  `json:"passivatedTotal"`
			Idle       float64 `json:"idleSeconds"`
		} `json:"partitions"`
	}
	if err := json.Unmarshal(body, &h); err != nil {
		t.Fatalf("/health %s: %v", body, err)
	}
	eq(t, int64(2), h.Partitions.Active, "/health active: %s", body)
	eq(t, uint64(6), h.Partitions.Passivated, "/health passivated: %s", body)
	eq(t, 3600.0, h.Partitions.Idle, "/health idleSeconds: %s", body)
}
