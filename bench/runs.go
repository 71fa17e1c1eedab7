package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// A target counts as met when two consecutive full runs meet it: one run on two shared cores
// can pass a target by luck. Each full run (no -quick, no -only) is kept beside the report as
// lastFullName, and the next full run marks each of its rows with whether that run met it
// too (Row.MetLastRun); the table's met? column says "yes" only for both.

// lastFullName is the file, beside the JSON report, that holds the last full run's report.
const lastFullName = "last-full.json"

// full reports whether o is a full run: every scenario at full size.
func (o options) full() bool { return !o.Quick && len(o.Only) == 0 }

// compareWithLastFull marks r's rows with whether the last full run, kept beside out, met
// the same target (the same scenario and metric), and returns that run's revision and date;
// ok is false when there is none to compare with.
func (r *Report) compareWithLastFull(out string) (rev, date string, ok bool) {
	b, err := os.ReadFile(filepath.Join(filepath.Dir(out), lastFullName))
	if err != nil {
		return "", "", false
	}
	var last Report
	if json.Unmarshal(b, &last) != nil {
		return "", "", false
	}
	met := map[[2]string]*bool{}
	for _, row := range last.Rows {
		met[[2]string{row.Scenario, row.Metric}] = row.Met
	}
	for i, row := range r.Rows {
		if row.Met != nil {
			r.Rows[i].MetLastRun = met[[2]string{row.Scenario, row.Metric}]
		}
	}
	return last.Machine.Revision, last.Machine.Date, true
}

// keepAsLastFull writes r as the last full run, beside out.
func (r *Report) keepAsLastFull(out string) error {
	return r.writeJSON(filepath.Join(filepath.Dir(out), lastFullName))
}

// metColumn is the table's met? column of row: "yes" when this run and the last full run
// met its target, "once" when only this run did, "NO" when this run did not; "" for a row
// without a target.
func metColumn(row Row, compared bool) string {
	switch {
	case row.Met == nil:
		return ""
	case !*row.Met:
		return "NO"
	case !compared:
		return "yes"
	case row.MetLastRun != nil && *row.MetLastRun:
		return "yes"
	}
	return "once"
}

// printRunsSummary counts the targets met in this run and the last full one.
func (r *Report) printRunsSummary(w io.Writer, lastRev, lastDate string) {
	both, once, missed := 0, 0, 0
	for _, row := range r.Rows {
		switch metColumn(row, true) {
		case "yes":
			both++
		case "once":
			once++
		case "NO":
			missed++
		}
	}
	fmt.Fprintf(w, "targets: %d met in this run and in the last full run (%s, %s), %d in this run only (\"once\"), %d missed\n",
		both, lastRev, lastDate, once, missed)
}
