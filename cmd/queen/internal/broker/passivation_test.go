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

// TestPressurePassivationOverPostgres: past the bound on active partitions
// (MaxActivePartitions 2 here; QUEEN_PARTITION_MEMORY_MB in production),
// the least recently pushed partitions are passivated, whatever the idle
// setting, and repeats stay duplicates with the original's message id.
// /health and /metrics report the bound, the pressure passivations and the
// estimated bytes.
func TestPressurePassivationOverPostgres(t *testing.T) {
	e := startEnv(t, func(c *Config) { c.PartitionIdle = time.Hour; c.MaxActivePartitions = 2 })
	parts := []string{"a", "b", "c", "d", "e"}
	orig := map[string]string{}
	for _, p := range parts {
		r := e.pushOK(t, "http", items(it("pp", p, "t-"+p)), 1)
		eq(t, "queued", r[0].Status, "first push to %s", p)
		orig[p] = r[0].MessageID
	}
	for _, p := range parts {
		r := e.pushOK(t, "nats", items(it("pp", p, "t-"+p)), 1)
		eq(t, "duplicate", r[0].Status, "repeat to %s", p)
		eq(t, orig[p], r[0].MessageID, "repeat to %s: the original's id", p)
	}
	// A refusal (an actor that has not yet seen its commit end) leaves the
	// count over the bound until the next spawn: none comes here.
	eventually(t, 20*time.Second, 5*time.Millisecond, "at most 2 active", func() (bool, string) {
		ps := e.b.host.PartitionStats()
		if ps.Active > 2 {
			e.b.host.Passivate(time.Hour)
		}
		return ps.Active <= 2, fmt.Sprintf("%+v", ps)
	})
	ps := e.b.host.PartitionStats()
	if ps.PressurePassivated < 8 {
		t.Errorf("pressure passivations %d, want at least 8 (10 activations, 2 alive): %+v", ps.PressurePassivated, ps)
	}
	eq(t, float64(ps.PressurePassivated), e.metricValue(t, "queen_partitions_pressure_passivated_total"), "pressure passivations")
	eq(t, 2.0, e.metricValue(t, "queen_partitions_active_max"), "bound")
	eq(t, float64(ps.Active*1400), e.metricValue(t, "queen_partitions_bytes"), "estimated bytes")

	resp, err := e.hc.Get(e.base + "/health")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var h struct {
		Partitions struct {
			Active    int64  `json:"active"`
			Pressured uint64 `json:"pressurePassivatedTotal"`
			MaxActive int    `json:"maxActive"`
			Bytes     int64  `json:"bytes"`
		} `json:"partitions"`
	}
	if err := json.Unmarshal(body, &h); err != nil {
		t.Fatalf("/health %s: %v", body, err)
	}
	eq(t, 2, h.Partitions.MaxActive, "/health maxActive: %s", body)
	eq(t, h.Partitions.Active*1400, h.Partitions.Bytes, "/health bytes: %s", body)
	if h.Partitions.Pressured < 8 {
		t.Errorf("/health pressurePassivatedTotal: %s", body)
	}
}
