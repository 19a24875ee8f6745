package htmlreport

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image/color"
	"math"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/queen-mq/queen-go/loadtest/report"
)

// series is one line of a chart: a figure of each timeline point, ok false
// where the point does not have it (the line has a gap there).
type series struct {
	name  string
	value func(p report.TimelinePoint) (v float64, ok bool)
}

// chartSpec is one chart: its series share the y axis. bytes charts are
// drawn in MiB or GiB, whichever reads better for their largest value.
type chartSpec struct {
	id, title, yLabel string
	bytes             bool
	// fromZero: the y axis starts at 0 (unless a value is negative).
	fromZero bool
	series   []series
	// seriesOf, when set, gives the series from the runs instead (one per
	// consumer group, say).
	seriesOf func(runs []Run) []series
}

func always(f func(report.TimelinePoint) float64) func(report.TimelinePoint) (float64, bool) {
	return func(p report.TimelinePoint) (float64, bool) { return f(p), true }
}

func pointer(f func(report.TimelinePoint) *float64) func(report.TimelinePoint) (float64, bool) {
	return func(p report.TimelinePoint) (float64, bool) {
		if v := f(p); v != nil {
			return *v, true
		}
		return 0, false
	}
}

// sized is a size that is 0 when it could not be read (the database's).
func sized(f func(report.TimelinePoint) int64) func(report.TimelinePoint) (float64, bool) {
	return func(p report.TimelinePoint) (float64, bool) {
		v := f(p)
		return float64(v), v != 0
	}
}

// specs are the charts a report can have; a chart is drawn when some run's
// timeline has a value of one of its series, a series when some run has one.
var specs = []chartSpec{
	{id: "rates", title: "Throughput: stored, acked and sent per second", yLabel: "messages/s", fromZero: true, series: []series{
		{"stored/s", always(func(p report.TimelinePoint) float64 { return p.StoredPerSecond })},
		{"acked/s (all groups)", pointer(func(p report.TimelinePoint) *float64 { return p.AckedPerSecond })},
		{"items sent/s", always(func(p report.TimelinePoint) float64 { return p.ItemsPerSecond })},
	}},
	{id: "push-latency", title: "Push latency (per interval)", yLabel: "ms", fromZero: true, series: []series{
		{"p50", always(func(p report.TimelinePoint) float64 { return p.P50 })},
		{"p99", always(func(p report.TimelinePoint) float64 { return p.P99 })},
	}},
	{id: "e2e-latency", title: "End-to-end latency: push commit to handler (per interval)", yLabel: "ms", fromZero: true, series: []series{
		{"p50", pointer(func(p report.TimelinePoint) *float64 { return p.E2EP50 })},
		{"p99", pointer(func(p report.TimelinePoint) *float64 { return p.E2EP99 })},
	}},
	{id: "memory", title: "Memory: broker RSS, the harness's heap and its audit records", bytes: true, fromZero: true, series: []series{
		{"broker RSS", func(p report.TimelinePoint) (float64, bool) {
			return float64(p.BrokerRSS), p.BrokerMetrics || p.BrokerRSS > 0
		}},
		{"harness heap", sized(func(p report.TimelinePoint) int64 { return p.HarnessHeap })},
		{"audit records", sized(func(p report.TimelinePoint) int64 { return p.LedgerBytes })},
	}},
	{id: "bytes-per-message", title: "Bytes per message stored in the interval", yLabel: "B/message", fromZero: true, series: []series{
		{"WAL", pointer(func(p report.TimelinePoint) *float64 { return p.WALBytesPerMessage })},
		{"database", pointer(func(p report.TimelinePoint) *float64 { return p.DBBytesPerMessage })},
		{"sidecar", pointer(func(p report.TimelinePoint) *float64 { return p.SidecarBytesPerMessage })},
	}},
	{id: "storage", title: "Database size and WAL written since the start", bytes: true, fromZero: true, series: []series{
		{"database", sized(func(p report.TimelinePoint) int64 { return p.DBBytes })},
		{"sidecar", sized(func(p report.TimelinePoint) int64 { return p.SidecarBytes })},
		{"WAL written", sized(func(p report.TimelinePoint) int64 { return p.WALBytes })},
	}},
	{id: "backlog", title: "Backlog per consumer group: stored, not yet acked", yLabel: "messages", fromZero: true, seriesOf: backlogSeries},
}

// backlogSeries is one series per consumer group of the runs' timelines
// (TimelinePoint.Backlog), in the order the groups first appear. A group is
// named by its short name (groupKey), so the same group of several runs
// (g0 of loadtest-1 and of loadtest-2) is one series of each.
func backlogSeries(runs []Run) []series {
	var out []series
	seen := map[string]bool{}
	for _, r := range runs {
		for _, p := range r.Report.Timeline {
			for _, b := range p.Backlog {
				key := groupKey(b.Group)
				if seen[key] {
					continue
				}
				seen[key] = true
				out = append(out, series{name: key, value: func(p report.TimelinePoint) (float64, bool) {
					for _, b := range p.Backlog {
						if groupKey(b.Group) == key {
							return float64(b.Messages), true
						}
					}
					return 0, false
				}})
			}
		}
	}
	return out
}

// groupKey is a consumer group's short name: the harness names its groups
// <queue>-g<n>, and the key is g<n>; any other name is its own key.
func groupKey(group string) string {
	i := strings.LastIndexByte(group, '-')
	if i < 0 || !strings.HasPrefix(group[i+1:], "g") || len(group) < i+3 {
		return group
	}
	for _, c := range group[i+2:] {
		if c < '0' || c > '9' {
			return group
		}
	}
	return group[i+1:]
}

// Palettes: a run's series (one run) or the runs (several) by colour; the
// series of several runs by dashes. Colour-blind safe (Okabe and Ito).
var (
	palette = []color.RGBA{
		{0x00, 0x72, 0xb2, 0xff}, // blue
		{0xd5, 0x5e, 0x00, 0xff}, // vermilion
		{0x00, 0x9e, 0x73, 0xff}, // green
		{0xcc, 0x79, 0xa7, 0xff}, // purple
		{0xe6, 0x9f, 0x00, 0xff}, // orange
		{0x56, 0xb4, 0xe9, 0xff}, // sky
		{0x33, 0x33, 0x33, 0xff}, // grey
	}
	dashes = [][]vg.Length{nil, {vg.Points(6), vg.Points(3)}, {vg.Points(2), vg.Points(2)}, {vg.Points(8), vg.Points(2), vg.Points(2), vg.Points(2)}}
	// faultColours by kind (report.Fault*).
	faultColours = map[string]color.RGBA{
		report.FaultKill:       {0xc0, 0x10, 0x10, 0xff},
		report.FaultStop:       {0xe0, 0x80, 0x00, 0xff},
		report.FaultPGRestart:  {0x70, 0x30, 0xa0, 0xff},
		report.FaultPGFailover: {0x80, 0x40, 0x10, 0xff},
		report.FaultNATSKill:   {0x00, 0x80, 0x80, 0xff},
	}
)

func faultColour(kind string) color.RGBA {
	if c, ok := faultColours[kind]; ok {
		return c
	}
	return color.RGBA{0x60, 0x60, 0x60, 0xff}
}

// lineLook is how a series of a run is drawn.
func lineLook(runs, run, s int) (color.RGBA, []vg.Length) {
	if runs == 1 {
		return palette[s%len(palette)], nil
	}
	return palette[run%len(palette)], dashes[s%len(dashes)]
}

// fault is one fault of a run as the charts mark it.
type fault struct {
	Run   string  `json:"run"`
	Kind  string  `json:"kind"`
	Label string  `json:"label"`
	At    float64 `json:"at_s"`
	// Until is its recovery (AtSeconds + RecoveredAfterSeconds), or its
	// pause's end when it did not recover.
	Until  float64 `json:"until_s"`
	Failed bool    `json:"recovery_failed,omitempty"`
}

// faultsOf lists a run's faults; tag prefixes their labels (several runs).
func faultsOf(name, tag string, r *report.Report) []fault {
	if r.Chaos == nil {
		return nil
	}
	out := make([]fault, 0, len(r.Chaos.Events))
	for _, e := range r.Chaos.Events {
		label := e.Kind
		switch e.Kind {
		case report.FaultKill, report.FaultStop:
			label += " b" + strconv.Itoa(e.Broker)
		case report.FaultNATSKill:
			label += " " + strings.TrimPrefix(e.NATSNode, "queen-")
		}
		if tag != "" {
			label = tag + " " + label
		}
		f := fault{Run: name, Kind: e.Kind, Label: label, At: e.AtSeconds, Until: e.AtSeconds + e.RecoveredAfterSeconds, Failed: e.Error != ""}
		if f.Failed {
			f.Until = e.AtSeconds + e.PauseSeconds
		}
		out = append(out, f)
	}
	return out
}

// chartData is what a chart shows, as its data-... script holds it.
type chartData struct {
	Chart  string       `json:"chart"`
	Title  string       `json:"title"`
	XUnit  string       `json:"x_unit"`
	YUnit  string       `json:"y_unit"`
	Series []seriesData `json:"series"`
	Faults []fault      `json:"faults"`
}

// seriesData is one run's series: the points' times (x_unit) and values
// (y_unit; null where the point has none).
type seriesData struct {
	Run    string     `json:"run"`
	Name   string     `json:"name"`
	Colour string     `json:"colour"`
	Dash   bool       `json:"dashed"`
	T      []float64  `json:"t"`
	Y      []*float64 `json:"y"`
}

// chart is one rendered chart.
type chart struct {
	ID, Title string
	Points    string // the timeline points of each run, space-separated
	Faults    int
	SVG       []byte
	Data      []byte // JSON (chartData), safe inside a script element
	Legend    []legendEntry
	YUnit     string
}

type legendEntry struct {
	Label, Colour string
	Dashed, Fault bool
}

// xScale is the unit of the time axis: minutes for runs over 15 minutes.
func xScale(runs []Run) (div float64, unit string) {
	var last float64
	for _, r := range runs {
		if tl := r.Report.Timeline; len(tl) > 0 {
			last = max(last, tl[len(tl)-1].T)
		}
	}
	if last > 900 {
		return 60, "min"
	}
	return 1, "s"
}

// yScale is the divisor and unit of a chart's values.
func yScale(spec chartSpec, maxAbs float64) (div float64, unit string) {
	switch {
	case !spec.bytes:
		return 1, spec.yLabel
	case maxAbs >= 4<<30:
		return 1 << 30, "GiB"
	default:
		return 1 << 20, "MiB"
	}
}

// buildCharts renders every chart some run has data for.
func buildCharts(runs []Run) ([]chart, error) {
	xdiv, xunit := xScale(runs)
	var faults []fault
	for i, r := range runs {
		tag := ""
		if len(runs) > 1 {
			tag = runTag(i)
		}
		faults = append(faults, faultsOf(r.Name, tag, r.Report)...)
	}
	var out []chart
	for _, spec := range specs {
		if spec.seriesOf != nil {
			spec.series = spec.seriesOf(runs)
		}
		// Which series some run has, and the largest value.
		var maxAbs float64
		has := make([]bool, len(spec.series))
		for si, s := range spec.series {
			for _, r := range runs {
				for _, p := range r.Report.Timeline {
					if v, ok := s.value(p); ok {
						has[si] = true
						maxAbs = max(maxAbs, math.Abs(v))
					}
				}
			}
		}
		drawn := 0
		for _, h := range has {
			if h {
				drawn++
			}
		}
		if drawn == 0 {
			continue
		}
		ydiv, yunit := yScale(spec, maxAbs)
		c, err := renderChart(spec, runs, has, xdiv, xunit, ydiv, yunit, faults)
		if err != nil {
			return nil, fmt.Errorf("chart %s: %w", spec.id, err)
		}
		out = append(out, c)
	}
	return out, nil
}

// runTag names run i in labels: A, B, ...
func runTag(i int) string {
	if i < 26 {
		return string(rune('A' + i))
	}
	return "R" + strconv.Itoa(i+1)
}

func hexColour(c color.RGBA) string { return fmt.Sprintf("#%02x%02x%02x", c.R, c.G, c.B) }

// The chart's drawing size; the page scales it to its width.
const (
	chartWidth  = 10 * vg.Inch
	chartHeight = 3.4 * vg.Inch
	// maxFaultLabels: with more faults on a chart their lines are drawn
	// without labels (the legend and the fault table name them).
	maxFaultLabels = 24
)

func renderChart(spec chartSpec, runs []Run, has []bool, xdiv float64, xunit string, ydiv float64, yunit string, faults []fault) (chart, error) {
	p := plot.New()
	styleAxes(p)
	p.X.Label.Text = "time since the start (" + xunit + ")"
	p.Y.Label.Text = yunit
	p.X.Tick.Marker = humanTicks{}
	p.Y.Tick.Marker = humanTicks{}
	p.Add(plotter.NewGrid())

	data := chartData{Chart: spec.id, Title: spec.title, XUnit: xunit, YUnit: yunit, Faults: []fault{}}
	c := chart{ID: spec.id, Title: spec.title, YUnit: yunit}
	var points []string
	for _, r := range runs {
		points = append(points, strconv.Itoa(len(r.Report.Timeline)))
	}
	c.Points = strings.Join(points, " ")

	// Faults first, so the lines are drawn over their bands.
	if len(faults) > 0 {
		p.Add(&faultMarks{faults: faults, xdiv: xdiv, labels: len(faults) <= maxFaultLabels})
		data.Faults = faults
		c.Faults = len(faults)
		seen := map[string]bool{}
		for _, f := range faults {
			if !seen[f.Kind] {
				seen[f.Kind] = true
				c.Legend = append(c.Legend, legendEntry{Label: f.Kind, Colour: hexColour(faultColour(f.Kind)), Fault: true})
			}
		}
	}
	minY := math.Inf(1)
	var legend []legendEntry
	for ri, r := range runs {
		for si, s := range spec.series {
			if !has[si] {
				continue
			}
			col, dash := lineLook(len(runs), ri, si)
			sd := seriesData{Run: r.Name, Name: s.name, Colour: hexColour(col), Dash: dash != nil,
				T: make([]float64, 0, len(r.Report.Timeline)), Y: make([]*float64, 0, len(r.Report.Timeline))}
			var seg plotter.XYs
			var segs []plotter.XYs
			for _, pt := range r.Report.Timeline {
				x := pt.T / xdiv
				sd.T = append(sd.T, x)
				v, ok := s.value(pt)
				if !ok || math.IsNaN(v) || math.IsInf(v, 0) {
					sd.Y = append(sd.Y, nil)
					if len(seg) > 0 {
						segs, seg = append(segs, seg), nil
					}
					continue
				}
				y := v / ydiv
				sd.Y = append(sd.Y, &y)
				seg = append(seg, plotter.XY{X: x, Y: y})
				minY = math.Min(minY, y)
			}
			if len(seg) > 0 {
				segs = append(segs, seg)
			}
			ls := draw.LineStyle{Color: col, Width: vg.Points(1.5), Dashes: dash}
			for _, sg := range segs {
				l, err := plotter.NewLine(sg)
				if err != nil {
					return chart{}, err
				}
				l.LineStyle = ls
				p.Add(l)
				// Dots where a line alone would not show a point: a
				// short timeline, or a point between two gaps.
				if len(sg) == 1 || len(r.Report.Timeline) <= 60 {
					sc, err := plotter.NewScatter(sg)
					if err != nil {
						return chart{}, err
					}
					sc.GlyphStyle = draw.GlyphStyle{Color: col, Radius: vg.Points(2), Shape: draw.CircleGlyph{}}
					p.Add(sc)
				}
			}
			label := s.name
			if len(runs) > 1 {
				label = runTag(ri) + " " + r.Name + ": " + s.name
			}
			legend = append(legend, legendEntry{Label: label, Colour: sd.Colour, Dashed: sd.Dash})
			data.Series = append(data.Series, sd)
		}
	}
	c.Legend = append(legend, c.Legend...)
	p.X.Min = 0
	if spec.fromZero && minY >= 0 {
		p.Y.Min = 0
	}
	// A flat series still gets an axis with room above it.
	if p.Y.Max <= p.Y.Min {
		p.Y.Max = p.Y.Min + 1
	}
	p.Y.Max *= 1.05

	canvas := vgsvg.New(chartWidth, chartHeight)
	p.Draw(draw.New(canvas))
	var svg bytes.Buffer
	if _, err := canvas.WriteTo(&svg); err != nil {
		return chart{}, err
	}
	c.SVG = inlineSVG(svg.Bytes(), spec.id)
	js, err := json.Marshal(data) // escapes <, > and &: safe in a script element
	if err != nil {
		return chart{}, err
	}
	c.Data = js
	return c, nil
}

// inlineSVG drops the XML prolog and comment vgsvg writes (an HTML page
// holds the svg element itself) and names the drawing.
func inlineSVG(svg []byte, id string) []byte {
	if i := bytes.Index(svg, []byte("<svg")); i >= 0 {
		svg = svg[i:]
	}
	return bytes.Replace(svg, []byte("<svg "), []byte(`<svg role="img" class="plot" id="svg-`+id+`" `), 1)
}

// styleAxes sets the plot's text to the sans-serif Liberation face (the
// page's style falls back to the reader's sans-serif).
func styleAxes(p *plot.Plot) {
	sans := func(f font.Font, size vg.Length) font.Font {
		f.Typeface, f.Variant, f.Size = "Liberation", "Sans", size
		return f
	}
	p.X.Label.TextStyle.Font = sans(p.X.Label.TextStyle.Font, 11)
	p.Y.Label.TextStyle.Font = sans(p.Y.Label.TextStyle.Font, 11)
	p.X.Tick.Label.Font = sans(p.X.Tick.Label.Font, 10)
	p.Y.Tick.Label.Font = sans(p.Y.Tick.Label.Font, 10)
}

// humanTicks are plot.DefaultTicks labelled 1.5k, 60k, 2M.
type humanTicks struct{}

func (humanTicks) Ticks(min, max float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(min, max)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = human(ts[i].Value)
		}
	}
	return ts
}

// human formats a tick value: 0.25, 950, 1.5k, 60k, 2.5M, 3G.
func human(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1e9:
		return trim(v/1e9) + "G"
	case a >= 1e6:
		return trim(v/1e6) + "M"
	case a >= 1e4:
		return trim(v/1e3) + "k"
	default:
		return trim(v)
	}
}

func trim(v float64) string {
	s := strconv.FormatFloat(v, 'f', 3, 64)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	if s == "-0" {
		return "0"
	}
	return s
}

// faultMarks draws each fault as a vertical line at its start, a band until
// its recovery and, when there are few, a label at the top. When there are
// many (more than maxFaultLabels: an hour of chaos has hundreds), full-height
// lines would cover the series, so each is a short tick on the x axis (a
// rug) without a band, but for the faults that did not recover, which keep
// their full-height dashed line.
type faultMarks struct {
	faults []fault
	xdiv   float64
	labels bool
}

func (m *faultMarks) Plot(c draw.Canvas, p *plot.Plot) {
	trX, _ := p.Transforms(&c)
	ts := draw.TextStyle{
		Color:    color.RGBA{0x30, 0x30, 0x30, 0xff},
		Font:     font.From(font.Font{Typeface: "Liberation", Variant: "Sans"}, 9),
		Rotation: math.Pi / 2,
		XAlign:   text.XRight,
		YAlign:   text.YTop,
		Handler:  plot.DefaultTextHandler,
	}
	rug := c.Min.Y + (c.Max.Y-c.Min.Y)*0.06
	for _, f := range m.faults {
		col := faultColour(f.Kind)
		x0, x1 := trX(f.At/m.xdiv), trX(f.Until/m.xdiv)
		if !m.labels && !f.Failed {
			c.StrokeLine2(draw.LineStyle{Color: col, Width: vg.Points(1)}, x0, c.Min.Y, x0, rug)
			continue
		}
		if x1 > x0 {
			band := color.NRGBA{col.R, col.G, col.B, 0x20}
			c.FillPolygon(band, []vg.Point{{X: x0, Y: c.Min.Y}, {X: x1, Y: c.Min.Y}, {X: x1, Y: c.Max.Y}, {X: x0, Y: c.Max.Y}})
		}
		ls := draw.LineStyle{Color: col, Width: vg.Points(1.2)}
		if f.Failed {
			ls.Dashes = []vg.Length{vg.Points(3), vg.Points(2)}
		}
		c.StrokeLine2(ls, x0, c.Min.Y, x0, c.Max.Y)
		if m.labels {
			c.FillText(ts, vg.Point{X: x0 + vg.Points(2), Y: c.Max.Y - vg.Points(2)}, f.Label)
		}
	}
}

// DataRange widens the x axis to the faults; the y axis is the series'.
func (m *faultMarks) DataRange() (xmin, xmax, ymin, ymax float64) {
	xmin, xmax = math.Inf(1), math.Inf(-1)
	for _, f := range m.faults {
		xmin, xmax = math.Min(xmin, f.At/m.xdiv), math.Max(xmax, f.Until/m.xdiv)
	}
	return xmin, xmax, math.Inf(1), math.Inf(-1)
}
