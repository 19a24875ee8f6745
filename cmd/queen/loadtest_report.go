package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/queen-mq/queen-go/loadtest/htmlreport"
	"github.com/queen-mq/queen-go/loadtest/report"
)

// loadtestReportCmd is `queen loadtest report A.json [B.json ...] -o
// FILE.html`: the HTML report of earlier runs' --json output, their
// timelines overlaid.
func loadtestReportCmd() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "report RUN.json [RUN.json ...] -o FILE.html",
		Short: "Write the HTML report of runs saved with --json, their timelines overlaid on the same charts",
		Long: `Reads one or more reports that queen loadtest --json printed (one JSON object each) and writes
one self-contained HTML page (no network needed to open it): each run's settings and summary, side by
side, and the charts of their timelines overlaid (each run a colour, named A, B, ... after its file),
with every run's faults marked where they happened. One file gives the page --report writes.`,
		Example: `  queen loadtest --embedded --duration 5m --json > a.json
  queen loadtest --embedded --duration 5m --producer-mode async --batch 1 --json > b.json
  queen loadtest report a.json b.json -o compare.html`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErr("queen loadtest report: name at least one report (a file of queen loadtest --json)")
			}
			if out == "" {
				return usageErr("queen loadtest report: -o FILE.html is required")
			}
			runs := make([]htmlreport.Run, 0, len(args))
			for _, path := range args {
				r, err := readJSONReport(path)
				if err != nil {
					return err
				}
				runs = append(runs, htmlreport.Run{Name: strings.TrimSuffix(filepath.Base(path), ".json"), Report: r})
			}
			var b bytes.Buffer
			if err := htmlreport.Write(&b, runs...); err != nil {
				return err
			}
			if err := os.WriteFile(out, b.Bytes(), 0o644); err != nil {
				return err
			}
			what := "1 run"
			if len(runs) > 1 {
				what = fmt.Sprintf("%d runs overlaid", len(runs))
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "loadtest: report of %s written to %s\n", what, out)
			return nil
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "the HTML file to write")
	return cmd
}

// readJSONReport reads the first JSON object of a file queen loadtest
// --json wrote: a run's report (a --compare's rounds are refused).
func readJSONReport(path string) (*report.Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var probe struct {
		Mode   report.Mode     `json:"mode"`
		Rounds json.RawMessage `json:"rounds"`
	}
	if err := json.NewDecoder(bytes.NewReader(b)).Decode(&probe); err != nil {
		return nil, fmt.Errorf("%s: not a queen loadtest --json report: %w", path, err)
	}
	switch {
	case probe.Rounds != nil:
		return nil, fmt.Errorf("%s: a --compare's rounds, not one run's report (their runs have no timeline)", path)
	case probe.Mode == "":
		return nil, fmt.Errorf("%s: not a queen loadtest --json report (no \"mode\")", path)
	}
	var r report.Report
	if err := json.NewDecoder(bytes.NewReader(b)).Decode(&r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &r, nil
}

// writeHTMLReport writes --report's page of r to f (the file created before
// the run) and says where on progress; a run that produced no report
// leaves the file empty and says so.
func writeHTMLReport(f *os.File, progress io.Writer, r *report.Report) error {
	if progress == nil {
		progress = io.Discard
	}
	if r == nil {
		return fmt.Errorf("--report: the run produced no report; %s is left empty", f.Name())
	}
	var b bytes.Buffer
	if err := htmlreport.Write(&b, htmlreport.Run{Name: strings.TrimSuffix(filepath.Base(f.Name()), ".html"), Report: r}); err != nil {
		return fmt.Errorf("--report: %w", err)
	}
	if _, err := f.Write(b.Bytes()); err != nil {
		return fmt.Errorf("--report: %w", err)
	}
	fmt.Fprintf(progress, "loadtest: report written to %s\n", f.Name())
	return nil
}
