package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/queen-mq/queen-go/internal/browsertest"
	"github.com/queen-mq/queen-go/loadtest/report"
)

// runLoadtestCmd runs `queen loadtest args...` in this process.
func runLoadtestCmd(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	root := rootCmd()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(append([]string{"loadtest"}, args...))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	err = root.ExecuteContext(ctx)
	return out.String(), errOut.String(), err
}

// pageChart is what the browser finds of one chart.
type pageChart struct {
	ID     string `json:"id"`
	Points string `json:"points"`
	Faults int    `json:"faults"`
	// Drawn: the SVG's size on the page (CSS pixels).
	Width  float64 `json:"width"`
	Height float64 `json:"height"`
	// Lens: each series' number of values, from the chart's data script;
	// Times the first series' times.
	Series []string    `json:"series"`
	Lens   []int       `json:"lens"`
	Times  []float64   `json:"times"`
	Values [][]float64 `json:"values"`
	// Labels: the fault labels drawn in the SVG.
	Labels []string `json:"labels"`
	// Lines: the series with a line drawn in their colour in the SVG.
	Lines int `json:"lines"`
}

// chartsInBrowser opens a report page in Chromium and reads its charts.
func chartsInBrowser(t *testing.T, b *browsertest.Browser, file string) []pageChart {
	t.Helper()
	b.Run(t, "open the report", chromedp.Navigate("file://"+file))
	b.WaitFor(t, "the page loaded", `document.readyState === "complete" && document.querySelector("h1") !== null`)
	charts := browsertest.Eval[[]pageChart](t, b, `[...document.querySelectorAll("figure.chart")].map(f => {
		const svg = f.querySelector("svg"), r = svg ? svg.getBoundingClientRect() : {width: 0, height: 0};
		const d = JSON.parse(document.getElementById("data-" + f.dataset.chart).textContent);
		return {id: f.dataset.chart, points: f.dataset.points, faults: +f.dataset.faults, width: r.width, height: r.height,
			series: d.series.map(s => s.run + " " + s.name), lens: d.series.map(s => s.y.length), times: d.series[0].t,
			values: d.series.map(s => s.y.map(v => v === null ? -1 : v)),
			labels: svg ? [...svg.querySelectorAll("text")].map(x => x.textContent).filter(x => /kill|stop|pg-/.test(x)) : [],
			lines: svg ? d.series.filter(s => [...svg.querySelectorAll("path")].some(p =>
				(p.getAttribute("style") || "").toLowerCase().includes("stroke:" + s.colour.toLowerCase()))).length : 0};
	})`)
	b.NoJSErrors(t, "opening the report")
	return charts
}

// TestLoadtestReportInChromium (issue 40): a short real run with consumers
// writes --report; in headless Chromium every chart is drawn and has one
// value per timeline point of every series, at the timeline's times.
func TestLoadtestReportInChromium(t *testing.T) {
	t.Parallel()
	br := browsertest.Start(t, 1280, 900)
	b := startTestBroker(t)
	dir := t.TempDir()
	page := filepath.Join(dir, "run.html")
	stdout, stderr, err := runLoadtestCmd(t, "--target", b.HTTPURL(), "--database-url", b.DatabaseURL(),
		"--duration", "4s", "--sample-every", "1s", "--producers", "2", "--partitions", "4", "--batch", "20",
		"--consumers", "1", "--groups", "2", "--consume-batch", "30", "--wake-probes", "0", "--json", "--report", page)
	require.NoError(t, err, "stderr:\n%s", stderr)
	require.Contains(t, stderr, "loadtest: report written to "+page)
	var rep report.Report
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep), stdout)
	n := len(rep.Timeline)
	require.GreaterOrEqual(t, n, 3, "a 4 s run sampled every second")
	for _, p := range rep.Timeline {
		require.NotNil(t, p.AckedPerSecond, "the timeline has acked/s with consumers")
		require.Len(t, p.Backlog, 2, "the timeline has each group's backlog with consumers")
	}

	charts := chartsInBrowser(t, br, page)
	var ids []string
	for _, c := range charts {
		ids = append(ids, c.ID)
		require.Greater(t, c.Width, 600.0, "%s is drawn across the page", c.ID)
		require.Greater(t, c.Height, 150.0, c.ID)
		require.Equal(t, strconv.Itoa(n), c.Points, c.ID)
		require.Zero(t, c.Faults, c.ID)
		require.NotEmpty(t, c.Lens, c.ID)
		require.Equal(t, len(c.Series), c.Lines, "%s: a line drawn for each series", c.ID)
		for i, l := range c.Lens {
			require.Equal(t, n, l, "%s: %s", c.ID, c.Series[i])
		}
		for i, p := range rep.Timeline {
			require.Equal(t, p.T, c.Times[i], "%s point %d", c.ID, i)
		}
	}
	require.Equal(t, []string{"rates", "push-latency", "e2e-latency", "memory", "bytes-per-message", "storage", "backlog"}, ids)
	rates := charts[0]
	require.Equal(t, []string{"run stored/s", "run acked/s (all groups)", "run items sent/s"}, rates.Series)
	for i, p := range rep.Timeline {
		require.Equal(t, p.StoredPerSecond, rates.Values[0][i])
		require.Equal(t, *p.AckedPerSecond, rates.Values[1][i])
	}
	require.Equal(t, "run broker RSS", charts[3].Series[0], "an HTTP target's /metrics gives the broker's RSS")
	// Backlog per group: one line per group, a value at every point (the
	// lens above), the timeline's.
	backlog := charts[6]
	require.Equal(t, []string{"run g0", "run g1"}, backlog.Series)
	for i, p := range rep.Timeline {
		for g := range 2 {
			require.Equal(t, float64(p.Backlog[g].Messages), backlog.Values[g][i], "group %d point %d", g, i)
		}
	}

	// The same report through `queen loadtest report`, twice: overlaid.
	js := filepath.Join(dir, "a.json")
	require.NoError(t, os.WriteFile(js, []byte(stdout), 0o644))
	cmp := filepath.Join(dir, "compare.html")
	_, stderr, err = runLoadtestCmd(t, "report", js, js, "-o", cmp)
	require.NoError(t, err, stderr)
	for _, c := range chartsInBrowser(t, br, cmp) {
		require.Equal(t, strconv.Itoa(n)+" "+strconv.Itoa(n), c.Points, c.ID)
		require.Equal(t, 0, len(c.Lens)%2, c.ID)
		require.Equal(t, "a", strings.Fields(c.Series[0])[0])
		require.Equal(t, "a", strings.Fields(c.Series[len(c.Series)-1])[0])
		for _, l := range c.Lens {
			require.Equal(t, n, l, c.ID)
		}
	}
}

// TestLoadtestReportCommandRefuses: `queen loadtest report` wants -o and
// run reports; --report is refused with --compare before anything runs.
func TestLoadtestReportCommandRefuses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
		return p
	}
	run := write("run.json", `{"mode":"broker","target":"nats://x","timeline":[{"t_s":10,"stored_per_second":5}]}`+"\n")
	rounds := write("compare.json", `{"rounds":[],"median_ratio":0.9}`)
	other := write("other.json", `{"hello":1}`)
	out := filepath.Join(dir, "out.html")

	_, _, err := runLoadtestCmd(t, "report", run)
	require.ErrorContains(t, err, "-o FILE.html is required")
	require.Equal(t, exitUsage, exitCode(err))
	_, _, err = runLoadtestCmd(t, "report", "-o", out)
	require.ErrorContains(t, err, "name at least one report")
	_, _, err = runLoadtestCmd(t, "report", rounds, "-o", out)
	require.ErrorContains(t, err, "a --compare's rounds")
	_, _, err = runLoadtestCmd(t, "report", other, "-o", out)
	require.ErrorContains(t, err, `no "mode"`)
	_, _, err = runLoadtestCmd(t, "report", filepath.Join(dir, "missing.json"), "-o", out)
	require.ErrorIs(t, err, os.ErrNotExist)
	_, err = os.Stat(out)
	require.ErrorIs(t, err, os.ErrNotExist, "nothing written")

	_, stderr, err := runLoadtestCmd(t, "report", run, "-o", out)
	require.NoError(t, err)
	require.Contains(t, stderr, "report of 1 run written to "+out)
	page, err := os.ReadFile(out)
	require.NoError(t, err)
	require.Contains(t, string(page), `id="chart-rates" data-chart="rates" data-points="1"`)

	_, _, err = runLoadtestCmd(t, "--compare", "--report", filepath.Join(dir, "c.html"))
	require.ErrorContains(t, err, "--report draws one run's timeline")
	_, _, err = runLoadtestCmd(t, "--report", filepath.Join(dir, "no-such-dir", "r.html"), "--target", "nats://127.0.0.1:1", "--database-url", "postgres://127.0.0.1:1/x")
	require.ErrorContains(t, err, "--report: open")
}
