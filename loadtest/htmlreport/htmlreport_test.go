package htmlreport

import (
	"bytes"
	"encoding/json"
	"go/build"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/queen-mq/queen-go/loadtest/report"
)

// fakeRun is a report with n timeline points every 10 s (consumers, every
// figure) and a kill at 35 s recovered 4 s later.
func fakeRun(n int, rate float64) *report.Report {
	r := &report.Report{Mode: report.ModeBroker, Target: "nats://127.0.0.1:4222", Queue: "loadtest-1", Producers: 8,
		ProducerMode: report.ProducerSync, Partitions: 64, Batch: 100, PayloadBytes: 200, DupRatio: 0.1, Seconds: float64(n * 10),
		StoredMessages: int64(rate) * int64(n*10), StoredPerSecond: rate, SampleEverySeconds: 10,
		Postgres: report.Durability{Fsync: "on", SynchronousCommit: "on", FullPageWrites: "on"},
		Audit:    &report.AuditReport{Passed: true, TransactionIDs: 1000},
		Consume: &report.ConsumeReport{ConsumersPerGroup: 3, Groups: []string{"q-g0", "q-g1"}, FailMode: "nack",
			Audit: &report.ConsumeAudit{Passed: true}},
		Chaos: &report.ChaosReport{Mode: "kill", IntervalSeconds: 20, Faults: 1, Kills: 1, Recovered: 1,
			Events: []report.FaultReport{{Kind: report.FaultKill, Broker: 1, AtSeconds: 35, PauseSeconds: 1, RecoveredAfterSeconds: 4}}},
	}
	for i := range n {
		wal, db, side := 250.0, 260.0+float64(i), 80.0
		acked, e50, e99 := rate*0.98, 12.0, 40.0
		p := report.TimelinePoint{T: float64(10 * (i + 1)), StoredPerSecond: rate + float64(i), ItemsPerSecond: rate * 1.1,
			P50: 3, P99: 9, BrokerRSS: 300 << 20, BrokerMetrics: true, DBBytes: int64(i+1) << 28, SidecarBytes: int64(i+1) << 26,
			WALBytes: int64(i+1) << 28, WALBytesPerMessage: &wal, DBBytesPerMessage: &db, SidecarBytesPerMessage: &side,
			LedgerBytes: 1 << 20, HarnessHeap: 40 << 20, AckedPerSecond: &acked, E2EP50: &e50, E2EP99: &e99,
			Backlog: []report.GroupBacklog{{Group: r.Queue + "-g0", Messages: int64(100 * i)}, {Group: r.Queue + "-g1", Messages: 50}}}
		r.Timeline = append(r.Timeline, p)
	}
	return r
}

// scriptRe finds the charts' data scripts.
var scriptRe = regexp.MustCompile(`<script type="application/json" id="data-([a-z0-9-]+)">(.*?)</script>`)

func parseCharts(t *testing.T, page string) map[string]chartData {
	t.Helper()
	out := map[string]chartData{}
	for _, m := range scriptRe.FindAllStringSubmatch(page, -1) {
		var d chartData
		require.NoError(t, json.Unmarshal([]byte(m[2]), &d), m[1])
		out[m[1]] = d
	}
	return out
}

func render(t *testing.T, runs ...Run) string {
	t.Helper()
	var b bytes.Buffer
	require.NoError(t, Write(&b, runs...))
	return b.String()
}

// TestOneRun: every chart is there with its SVG, one value per timeline
// point in each series, and the fault marked on each.
func TestOneRun(t *testing.T) {
	t.Parallel()
	const n = 17
	page := render(t, Run{Name: "day", Report: fakeRun(n, 50000)})

	// Self-contained: nothing fetched.
	require.NotRegexp(t, `(?i)<script[^>]+src=|<link[^>]+href=|@import|url\(http|@font-face`, page)
	require.True(t, strings.HasPrefix(page, "<!DOCTYPE html>"))

	charts := parseCharts(t, page)
	want := map[string][]string{
		"rates":             {"stored/s", "acked/s (all groups)", "items sent/s"},
		"push-latency":      {"p50", "p99"},
		"e2e-latency":       {"p50", "p99"},
		"memory":            {"broker RSS", "harness heap", "audit records"},
		"bytes-per-message": {"WAL", "database", "sidecar"},
		"storage":           {"database", "sidecar", "WAL written"},
		"backlog":           {"g0", "g1"},
	}
	require.Len(t, charts, len(want))
	for id, names := range want {
		d, ok := charts[id]
		require.True(t, ok, "chart %s", id)
		var got []string
		for _, s := range d.Series {
			got = append(got, s.Name)
			require.Len(t, s.T, n, "%s %s", id, s.Name)
			require.Len(t, s.Y, n, "%s %s", id, s.Name)
			for i, y := range s.Y {
				require.NotNil(t, y, "%s %s point %d", id, s.Name, i)
			}
		}
		require.Equal(t, names, got, id)
		require.Len(t, d.Faults, 1, id)
		require.Equal(t, report.FaultKill, d.Faults[0].Kind)
		require.Equal(t, 35.0, d.Faults[0].At)
		require.Equal(t, 39.0, d.Faults[0].Until)
		// The container's counts and the drawing.
		fig := regexp.MustCompile(`<figure class="chart" id="chart-` + id + `" data-chart="` + id + `" data-points="(\d+)" data-faults="(\d+)">\s*<h3>[^<]+</h3>\s*<svg role="img" class="plot" id="svg-` + id + `"`).FindStringSubmatch(page)
		require.NotNil(t, fig, "figure of %s", id)
		require.Equal(t, strconv.Itoa(n), fig[1])
		require.Equal(t, "1", fig[2])
	}
	// The fault's label is drawn in every chart's SVG.
	require.Equal(t, len(want), strings.Count(page, ">kill b1</text>"))
	// The values are the timeline's, in the chart's unit.
	require.Equal(t, 50000.0+16, *charts["rates"].Series[0].Y[16])
	require.Equal(t, "MiB", charts["memory"].YUnit)
	require.Equal(t, 300.0, *charts["memory"].Series[0].Y[0])
	require.Equal(t, 1600.0, *charts["backlog"].Series[0].Y[16])
	require.Equal(t, "messages", charts["backlog"].YUnit)
	// The settings, the summary (the text report too) and the fault table.
	for _, s := range []string{"audit passed · consume audit passed · 1 of 1 faults recovered", "8 sync, batch 100", "3 per group × 2 groups",
		"queued 0 · duplicate 0", "<th>sustained ratio</th>", "broker 1", "after 4.0 s", "queen loadtest: broker at nats://127.0.0.1:4222"} {
		require.Contains(t, page, s)
	}
}

// TestGaps: a figure a point does not have is null in the series and a gap
// in the line; a chart none of whose series has a value is left out.
func TestGaps(t *testing.T) {
	t.Parallel()
	r := fakeRun(6, 1000)
	r.Chaos, r.Consume = nil, nil
	for i := range r.Timeline {
		p := &r.Timeline[i]
		p.AckedPerSecond, p.E2EP50, p.E2EP99, p.Backlog = nil, nil, nil, nil
		p.BrokerRSS, p.BrokerMetrics = 0, false
		if i == 2 {
			p.WALBytesPerMessage = nil
		}
	}
	page := render(t, Run{Name: "nats", Report: r})
	charts := parseCharts(t, page)
	require.NotContains(t, charts, "e2e-latency")
	require.NotContains(t, charts, "backlog", "no backlog without consumers")
	require.Len(t, charts["rates"].Series, 2, "no acked/s without consumers")
	require.Equal(t, "harness heap", charts["memory"].Series[0].Name, "no broker RSS without /metrics")
	wal := charts["bytes-per-message"].Series[0]
	require.Len(t, wal.Y, 6)
	require.Nil(t, wal.Y[2])
	require.Empty(t, charts["rates"].Faults)
	require.Contains(t, page, `data-faults="0"`)
}

// TestCompare: two runs overlaid, each series once per run, each run's
// faults marked.
func TestCompare(t *testing.T) {
	t.Parallel()
	a, b := fakeRun(12, 50000), fakeRun(20, 40000)
	for i := range b.Timeline { // another run's queue: its groups are g0 and g1 too
		for j := range b.Timeline[i].Backlog {
			b.Timeline[i].Backlog[j].Group = strings.Replace(b.Timeline[i].Backlog[j].Group, "loadtest-1", "loadtest-2", 1)
		}
	}
	b.Chaos.Events = append(b.Chaos.Events, report.FaultReport{Kind: report.FaultPGFailover, Broker: -1, AtSeconds: 120, RecoveredAfterSeconds: 9})
	b.Chaos.Faults, b.Chaos.PGFailovers, b.Chaos.Recovered = 2, 1, 2
	page := render(t, Run{Name: "before", Report: a}, Run{Name: "after", Report: b})
	charts := parseCharts(t, page)
	require.Len(t, charts, 7)
	require.Equal(t, []string{"g0", "g1", "g0", "g1"}, seriesNames(charts["backlog"]))
	for id, d := range charts {
		runs := map[string]int{}
		for _, s := range d.Series {
			runs[s.Run]++
			want := map[string]int{"before": 12, "after": 20}[s.Run]
			require.Len(t, s.Y, want, "%s %s %s", id, s.Run, s.Name)
		}
		require.Equal(t, runs["before"], runs["after"], id)
		require.Positive(t, runs["before"], id)
		require.Len(t, d.Faults, 3, id)
		require.Contains(t, page, `id="chart-`+id+`" data-chart="`+id+`" data-points="12 20" data-faults="3"`)
	}
	rates := charts["rates"].Series
	require.NotEqual(t, rates[0].Colour, rates[3].Colour, "runs differ by colour")
	require.Equal(t, rates[0].Colour, rates[1].Colour, "a run's series share its colour")
	require.True(t, rates[1].Dash)
	for _, s := range []string{">A kill b1</text>", ">B kill b1</text>", ">B pg-failover</text>", "<th>A before</th><th>B after</th>", "Faults of B after"} {
		require.Contains(t, page, s)
	}
}

// TestManyFaults: an hour of faults is drawn without labels (the legend and
// the table name them) but every one is marked.
func TestManyFaults(t *testing.T) {
	t.Parallel()
	r := fakeRun(360, 1000)
	r.Chaos.Events = nil
	for i := range 300 {
		r.Chaos.Events = append(r.Chaos.Events, report.FaultReport{Kind: []string{report.FaultKill, report.FaultStop, report.FaultNATSKill}[i%3],
			NATSNode: "queen-nats-2", AtSeconds: float64(5 + 12*i), RecoveredAfterSeconds: 3})
	}
	page := render(t, Run{Name: "hour", Report: r})
	charts := parseCharts(t, page)
	require.Len(t, charts["rates"].Faults, 300)
	require.Equal(t, "min", charts["rates"].XUnit)
	require.InDelta(t, 60.0, charts["rates"].Series[0].T[359], 1e-9)
	require.NotContains(t, page, ">kill b0</text>")
	require.Contains(t, page, `<td>queen-nats-2</td>`)
}

func TestWriteRefuses(t *testing.T) {
	t.Parallel()
	require.Error(t, Write(&bytes.Buffer{}))
	require.Error(t, Write(&bytes.Buffer{}, Run{Name: "x"}))
	// A run without a timeline: the page says so, no chart.
	page := render(t, Run{Name: "short", Report: &report.Report{Mode: report.ModeBroker}})
	require.Contains(t, page, "No timeline points in short")
	require.Empty(t, parseCharts(t, page))
}

func seriesNames(d chartData) []string {
	var out []string
	for _, s := range d.Series {
		out = append(out, s.Name)
	}
	return out
}

func TestGroupKey(t *testing.T) {
	t.Parallel()
	for g, want := range map[string]string{"loadtest-17-g0": "g0", "q-g12": "g12", "orders": "orders", "a-b": "a-b", "q-g": "q-g", "q-gx1": "q-gx1", "q-": "q-", "g3": "g3"} {
		require.Equal(t, want, groupKey(g), g)
	}
}

func TestHuman(t *testing.T) {
	t.Parallel()
	for v, want := range map[float64]string{0: "0", 0.25: "0.25", 950: "950", 1500: "1500", 60000: "60k", 2.5e6: "2.5M", 3e9: "3G", -20000: "-20k", math.Copysign(0, -1): "0"} {
		require.Equal(t, want, human(v), "%g", v)
	}
}

// TestImports: a leaf beside loadtest/report, it imports that package, the
// chart library and the standard library only.
func TestImports(t *testing.T) {
	t.Parallel()
	pkg, err := build.ImportDir(".", 0)
	require.NoError(t, err)
	for _, imp := range pkg.Imports {
		first, _, _ := strings.Cut(imp, "/")
		ok := !strings.Contains(first, ".") || strings.HasPrefix(imp, "gonum.org/v1/plot") ||
			imp == "github.com/queen-mq/queen-go/loadtest/report"
		require.True(t, ok, "htmlreport imports %s", imp)
	}
}
