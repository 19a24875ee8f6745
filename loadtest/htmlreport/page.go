package htmlreport

import (
	"errors"
	"fmt"
	"html/template"
	"io"
	"sort"
	"strings"

	"github.com/queen-mq/queen-go/loadtest/report"
)

// Run is one run's report and the name the page gives it (its file's name,
// say).
type Run struct {
	Name   string
	Report *report.Report
}

// Write writes the page for runs: one run's settings, summary (the text
// report's facts), timeline charts and faults; given several, their settings
// and summaries side by side and their timelines overlaid on the same charts
// (each run a colour, each series a dash). A run without a timeline (shorter
// than its sample interval, or raw mode) adds no line. Errors are the
// writer's, or no run or a nil report.
func Write(w io.Writer, runs ...Run) error {
	if len(runs) == 0 {
		return errors.New("htmlreport: no run to show")
	}
	for i, r := range runs {
		if r.Report == nil {
			return fmt.Errorf("htmlreport: run %d (%s) has no report", i+1, r.Name)
		}
	}
	charts, err := buildCharts(runs)
	if err != nil {
		return err
	}
	pg := page{Compare: len(runs) > 1, Charts: make([]pageChart, 0, len(charts))}
	for i, r := range runs {
		tag := ""
		if pg.Compare {
			tag = runTag(i)
		}
		pg.Runs = append(pg.Runs, pageRun{Tag: tag, Name: r.Name, Report: r.Report, Text: textOf(r.Report),
			Verdict: verdictOf(r.Report), Faults: faultRows(r.Report)})
		if len(r.Report.Timeline) == 0 {
			pg.NoTimeline = append(pg.NoTimeline, r.Name)
		}
	}
	pg.Title = "queen loadtest: " + runs[0].Name
	if pg.Compare {
		names := make([]string, len(runs))
		for i, r := range runs {
			names[i] = r.Name
		}
		pg.Title = "queen loadtest: " + strings.Join(names, " vs ")
	}
	pg.Settings = table(runs, settingRows)
	pg.Summary = table(runs, summaryRows)
	for _, c := range charts {
		// The SVG is vgsvg's drawing of our figures (its text HTML-escaped);
		// the data is json.Marshal's, which escapes <, > and &.
		data := `<script type="application/json" id="data-` + c.ID + `">` + string(c.Data) + `</script>`
		pg.Charts = append(pg.Charts, pageChart{chart: c, SVG: template.HTML(c.SVG), Data: template.HTML(data)}) //nolint:gosec // see above
	}
	return pageTemplate.Execute(w, pg)
}

type page struct {
	Title      string
	Compare    bool
	Runs       []pageRun
	Settings   rows
	Summary    rows
	Charts     []pageChart
	NoTimeline []string
}

type pageRun struct {
	Tag, Name string
	Report    *report.Report
	Text      string
	Verdict   verdict
	Faults    []faultRow
}

type pageChart struct {
	chart
	SVG, Data template.HTML
}

// verdict is a run's outcome in a word and a class (ok, bad).
type verdict struct {
	Text, Class string
}

func verdictOf(r *report.Report) verdict {
	var bad []string
	if r.Audit != nil && !r.Audit.Passed {
		bad = append(bad, "audit FAILED")
	}
	if r.Consume != nil && r.Consume.Audit != nil && !r.Consume.Audit.Passed {
		bad = append(bad, "consume audit FAILED")
	}
	if c := r.Chaos; c != nil && c.Recovered < c.Faults {
		bad = append(bad, fmt.Sprintf("%d of %d faults not recovered", c.Faults-c.Recovered, c.Faults))
	}
	if r.Interrupted {
		bad = append(bad, "interrupted")
	}
	if len(bad) > 0 {
		return verdict{strings.Join(bad, " · "), "bad"}
	}
	var ok []string
	if r.Audit != nil {
		ok = append(ok, "audit passed")
	}
	if r.Consume != nil && r.Consume.Audit != nil {
		ok = append(ok, "consume audit passed")
	}
	if c := r.Chaos; c != nil {
		ok = append(ok, fmt.Sprintf("%d of %d faults recovered", c.Recovered, c.Faults))
	}
	if len(ok) == 0 {
		ok = append(ok, "completed")
	}
	return verdict{strings.Join(ok, " · "), "ok"}
}

func textOf(r *report.Report) string {
	var b strings.Builder
	r.WriteText(&b)
	return b.String()
}

// rows is a table: a label and one cell per run.
type rows []row

type row struct {
	Label string
	Cells []string
}

// table builds the rows of f over the runs, keeping a row any run fills.
func table(runs []Run, f func(*report.Report) []kv) rows {
	var order []string
	cells := map[string][]string{}
	for i, r := range runs {
		for _, e := range f(r.Report) {
			if _, ok := cells[e.k]; !ok {
				order = append(order, e.k)
				cells[e.k] = make([]string, len(runs))
			}
			cells[e.k][i] = e.v
		}
	}
	out := make(rows, 0, len(order))
	for _, k := range order {
		c := cells[k]
		for i := range c {
			if c[i] == "" {
				c[i] = "—"
			}
		}
		out = append(out, row{Label: k, Cells: c})
	}
	return out
}

type kv struct{ k, v string }

func settingRows(r *report.Report) []kv {
	out := []kv{{"mode", string(r.Mode)}, {"target", r.Target}}
	if r.Queue != "" {
		out = append(out, kv{"queue", r.Queue})
	}
	if r.Table != "" {
		out = append(out, kv{"table", "queen_raw." + r.Table})
	}
	if r.ProducerMode == report.ProducerAsync {
		out = append(out, kv{"producers", fmt.Sprintf("%d async: single items, %d in flight, up to %d per request, linger %g ms", r.Producers, r.InFlight, r.MaxBatch, r.LingerMs)})
	} else {
		p := fmt.Sprintf("%d sync, batch %d", r.Producers, r.Batch)
		if r.Connections > 0 {
			p += fmt.Sprintf(", over %d NATS connections", r.Connections)
		}
		out = append(out, kv{"producers", p})
	}
	out = append(out,
		kv{"partitions", report.Commas(int64(r.Partitions))},
		kv{"payload", fmt.Sprintf("%d B", r.PayloadBytes)},
		kv{"dup ratio", fmt.Sprintf("%g", r.DupRatio)},
		kv{"elapsed", fmt.Sprintf("%.1f s", r.Seconds)})
	if r.SampleEverySeconds > 0 {
		out = append(out, kv{"timeline", fmt.Sprintf("every %g s, %d points", r.SampleEverySeconds, len(r.Timeline))})
	}
	out = append(out, kv{"dedup window", secondsOr(r.DedupWindowSeconds, "the queue's default")},
		kv{"retention", secondsOr(r.RetentionSeconds, "keep")})
	if c := r.Consume; c != nil {
		out = append(out, kv{"consumers", fmt.Sprintf("%d per group × %d groups (%s)", c.ConsumersPerGroup, len(c.Groups), strings.Join(c.Groups, ", "))},
			kv{"consume", fmt.Sprintf("batch %d, %d partitions per pop at most, lease %d s, retry limit %d", c.Batch, c.ConsumePartitions, c.LeaseSeconds, c.RetryLimit)},
			kv{"poison", fmt.Sprintf("fail ratio %g, fail mode %s", c.FailRatio, c.FailMode)})
	}
	if c := r.Cluster; c != nil {
		nats := "one NATS server in the harness"
		if c.NATSNodes > 0 {
			nats = fmt.Sprintf("a NATS cluster of %d nodes", c.NATSNodes)
		}
		out = append(out, kv{"cluster", fmt.Sprintf("%d brokers, %s, shard lease %.1f s, %d shards", c.Brokers, nats, c.ShardLeaseSeconds, c.Shards)})
	}
	if c := r.Chaos; c != nil {
		out = append(out, kv{"chaos", fmt.Sprintf("%s every %.0f s, seed %d", c.Mode, c.IntervalSeconds, c.Seed)})
	}
	d := r.Postgres
	pg := fmt.Sprintf("fsync %s, synchronous_commit %s, full_page_writes %s", d.Fsync, d.SynchronousCommit, d.FullPageWrites)
	if !d.Durable() {
		pg += " (NOT DURABLE: these figures are not comparable)"
	}
	return append(out, kv{"postgres", pg})
}

func secondsOr(s int, zero string) string {
	if s == 0 {
		return zero
	}
	return fmt.Sprintf("%d s", s)
}

func summaryRows(r *report.Report) []kv {
	out := []kv{
		{"stored", fmt.Sprintf("%s messages, %s/s", report.Commas(r.StoredMessages), report.Commas(int64(r.StoredPerSecond)))},
		{"sent", fmt.Sprintf("%s items, %s/s (%s new, %s repeats, %s retries)", report.Commas(r.ItemsSent), report.Commas(int64(r.ItemsPerSecond)),
			report.Commas(r.NewItems), report.Commas(r.Repeats), report.Commas(r.Retries))},
		{"verdicts", fmt.Sprintf("queued %s · duplicate %s · failed %s", report.Commas(r.Verdicts.Queued), report.Commas(r.Verdicts.Duplicate), report.Commas(r.Verdicts.Failed))},
		{"push latency", fmt.Sprintf("p50 %.1f ms · p99 %.1f ms · max %.1f ms", r.Latency.P50, r.Latency.P99, r.Latency.Max)},
		{"requests", fmt.Sprintf("%s, %s without verdicts", report.Commas(r.Requests), report.Commas(r.RequestErrors))},
		{"per stored message", fmt.Sprintf("WAL %s · database %s · sidecar %s", report.PerMessageText(r.WALBytesPerMessage, " B"),
			report.PerMessageText(r.DBBytesPerMessage, " B"), report.PerMessageText(r.SidecarBytesPerMessage, " B"))},
	}
	if len(r.Timeline) > 0 {
		s := fmt.Sprintf("%.3f", r.SustainedRatio)
		if !r.SustainedRatioMeaningful {
			s += " (a run under 5 minutes: not meaningful)"
		}
		out = append(out, kv{"sustained ratio", s})
	}
	if a := r.Audit; a != nil {
		s := fmt.Sprintf("passed: %s transaction ids, each stored exactly once", report.Commas(a.TransactionIDs))
		if !a.Passed {
			s = "FAILED: " + issues(a.Issues)
		}
		out = append(out, kv{"audit", s})
	}
	if c := r.Consume; c != nil {
		out = append(out, kv{"acked", fmt.Sprintf("%s, %s/s; drained %v in %.1f s", report.Commas(c.Acked), report.Commas(int64(c.AckedPerSecond)), c.Drained, c.DrainSeconds)},
			kv{"end-to-end latency", fmt.Sprintf("p50 %.1f ms · p99 %.1f ms · max %.1f ms", c.Latency.P50, c.Latency.P99, c.Latency.Max)})
		if a := c.Audit; a != nil {
			s := "passed"
			if !a.Passed {
				s = "FAILED: " + issues(a.Issues)
			}
			out = append(out, kv{"consume audit", s})
		}
	}
	if c := r.Chaos; c != nil {
		out = append(out, kv{"faults", fmt.Sprintf("%d (kill %d, stop %d, pg-restart %d, pg-failover %d, nats-kill %d), %d recovered",
			c.Faults, c.Kills, c.Stops, c.PGRestarts, c.PGFailovers, c.NATSKills, c.Recovered)})
	}
	return out
}

func issues(m map[string]int64) string {
	out := make([]string, 0, len(m))
	for k, n := range m {
		out = append(out, fmt.Sprintf("%s %s", k, report.Commas(n)))
	}
	sort.Strings(out)
	return strings.Join(out, " · ")
}

// faultRow is one line of a run's fault table.
type faultRow struct {
	At, Kind, Target, Recovered, During, After string
	Failed                                     bool
	Colour                                     string
}

func faultRows(r *report.Report) []faultRow {
	if r.Chaos == nil {
		return nil
	}
	out := make([]faultRow, 0, len(r.Chaos.Events))
	for _, e := range r.Chaos.Events {
		fr := faultRow{At: fmt.Sprintf("%.1f s", e.AtSeconds), Kind: e.Kind, Colour: hexColour(faultColour(e.Kind)),
			Recovered: fmt.Sprintf("after %.1f s", e.RecoveredAfterSeconds),
			During:    clientCell(e.During), After: fmt.Sprintf("%.1f s: %s", e.After.Seconds, clientCell(e.After))}
		switch e.Kind {
		case report.FaultKill, report.FaultStop:
			fr.Target = fmt.Sprintf("broker %d", e.Broker)
			if e.BrokerID != "" {
				fr.Target += " (" + e.BrokerID + ")"
			}
		case report.FaultNATSKill:
			fr.Target = e.NATSNode
		default:
			fr.Target = "PostgreSQL"
		}
		if e.Error != "" {
			fr.Recovered, fr.Failed = "FAILED: "+e.Error, true
		}
		out = append(out, fr)
	}
	return out
}

func clientCell(c report.ClientErrors) string {
	return fmt.Sprintf("%s errors of %s requests, %s failed items", report.Commas(c.Errors), report.Commas(c.Requests), report.Commas(c.FailedItems))
}

var pageTemplate = template.Must(template.New("page").Funcs(template.FuncMap{
	"dashStyle": func(dashed bool) string {
		if dashed {
			return "dashed"
		}
		return "solid"
	},
}).Parse(pageHTML))

const pageHTML = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}}</title>
<style>
body { font: 14px/1.45 "Liberation Sans", Arial, Helvetica, sans-serif; color: #222; margin: 0 auto; max-width: 1100px; padding: 1em 1.5em 3em; }
h1 { font-size: 1.5em; margin: .3em 0; }
h2 { font-size: 1.2em; margin: 1.6em 0 .5em; border-bottom: 1px solid #ddd; padding-bottom: .2em; }
h3 { font-size: 1em; margin: 1.2em 0 .2em; }
.verdict { display: inline-block; padding: .15em .6em; border-radius: .3em; font-weight: bold; margin: .1em .5em .1em 0; }
.verdict.ok { background: #e3f4e8; color: #165c2c; }
.verdict.bad { background: #fbe3e3; color: #8a1414; }
table { border-collapse: collapse; margin: .3em 0; }
th, td { text-align: left; vertical-align: top; padding: .2em .8em .2em 0; border-bottom: 1px solid #eee; }
th { font-weight: 600; white-space: nowrap; color: #444; }
td.num { font-variant-numeric: tabular-nums; }
figure.chart { margin: .4em 0 1.2em; }
figure.chart svg { width: 100%; height: auto; display: block; }
figure.chart svg text { font-family: "Liberation Sans", Arial, Helvetica, sans-serif !important; }
.legend { list-style: none; padding: 0; margin: .2em 0 0 3.5em; display: flex; flex-wrap: wrap; gap: .2em 1.2em; font-size: .92em; }
.legend .sw { display: inline-block; width: 2.2em; height: 0; vertical-align: middle; margin-right: .4em; border-top-width: 2.5px; }
.legend .fault .sw { width: .9em; height: .9em; border: 0; opacity: .75; }
pre { background: #f7f7f7; padding: .8em; overflow-x: auto; font-size: 12px; line-height: 1.35; }
.swatch { display: inline-block; width: .8em; height: .8em; margin-right: .3em; vertical-align: -.05em; }
.failed { color: #8a1414; font-weight: bold; }
.note { color: #666; }
</style>
</head>
<body>
<h1>{{.Title}}</h1>
{{range .Runs}}<div>{{if .Tag}}<b>{{.Tag}}</b> {{.Name}}: {{end}}<span class="verdict {{.Verdict.Class}}">{{.Verdict.Text}}</span></div>
{{end}}
<h2 id="settings">Settings</h2>
<table class="settings">
{{if .Compare}}<tr><th></th>{{range .Runs}}<th>{{.Tag}} {{.Name}}</th>{{end}}</tr>{{end}}
{{range .Settings}}<tr><th>{{.Label}}</th>{{range .Cells}}<td>{{.}}</td>{{end}}</tr>
{{end}}</table>

<h2 id="summary">Summary</h2>
<table class="summary">
{{if .Compare}}<tr><th></th>{{range .Runs}}<th>{{.Tag}} {{.Name}}</th>{{end}}</tr>{{end}}
{{range .Summary}}<tr><th>{{.Label}}</th>{{range .Cells}}<td class="num">{{.}}</td>{{end}}</tr>
{{end}}</table>

<h2 id="timeline">Timeline</h2>
{{if .NoTimeline}}<p class="note">No timeline points in {{range $i, $n := .NoTimeline}}{{if $i}}, {{end}}{{$n}}{{end}}: the run was shorter than its sample interval (--sample-every), or wrote raw COPY.</p>{{end}}
{{if .Charts}}<p class="note">Each point covers the interval since the one before it. Faults are vertical lines at their start, shaded until their recovery (a dashed line: its recovery failed); on a chart with more than 24 faults, a short tick on the time axis each (a recovery that failed keeps its dashed line).</p>{{end}}
{{range .Charts}}<figure class="chart" id="chart-{{.ID}}" data-chart="{{.ID}}" data-points="{{.Points}}" data-faults="{{.Faults}}">
<h3>{{.Title}}</h3>
{{.SVG}}
<ul class="legend">{{range .Legend}}{{if .Fault}}<li class="fault"><span class="sw" style="background: {{.Colour}}"></span>{{.Label}}</li>{{else}}<li><span class="sw" style="border-top-style: {{dashStyle .Dashed}}; border-top-color: {{.Colour}}"></span>{{.Label}}</li>{{end}}{{end}}</ul>
{{.Data}}
</figure>
{{end}}
{{range .Runs}}{{if .Faults}}
<h2 id="faults{{.Tag}}">Faults{{if .Tag}} of {{.Tag}} {{.Name}}{{end}}</h2>
<table class="faults">
<tr><th>at</th><th>fault</th><th>target</th><th>recovered</th><th>during (until the recovery)</th><th>after (until settled)</th></tr>
{{range .Faults}}<tr><td class="num">{{.At}}</td><td><span class="swatch" style="background: {{.Colour}}"></span>{{.Kind}}</td><td>{{.Target}}</td><td{{if .Failed}} class="failed"{{end}}>{{.Recovered}}</td><td>{{.During}}</td><td>{{.After}}</td></tr>
{{end}}</table>
{{end}}{{end}}
<h2 id="text">The text report</h2>
{{range .Runs}}<details{{if not $.Compare}} open{{end}}><summary>{{if .Tag}}{{.Tag}} {{end}}{{.Name}}</summary>
<pre>{{.Text}}</pre>
</details>
{{end}}
</body>
</html>
`
