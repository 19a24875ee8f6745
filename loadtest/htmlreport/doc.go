// Package htmlreport renders load-test reports (loadtest/report) as one self-contained HTML page: the run's settings, its summary and charts of its timeline (rates, latency, memory, bytes per message, database and WAL, backlog per consumer group) with every fault of its chaos section marked where it happened; several runs' timelines overlaid for comparison. The charts are SVG drawn by gonum.org/v1/plot and inlined, so the page needs no network, no script and no font to open.
//
// Every chart's container (figure.chart) carries data-points, the number of
// timeline points of each run (space-separated), and data-faults, the faults
// marked; a script element of type application/json (id "data-" and the
// chart's id) holds the plotted series and the faults, so tests and tools
// read what a chart shows without parsing its drawing.
//
// A leaf of the harness beside loadtest/report: it imports that package only
// (and the chart library), and does no I/O beyond the writer it is given.
package htmlreport
