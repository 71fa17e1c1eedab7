package testenv

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// metricsDoc is the guide whose metrics table lists every eventq_ and asynq_ metric, relative
// to the repository root.
const metricsDoc = "docs/operations.md"

var (
	documentedName = regexp.MustCompile("`((?:eventq|asynq)_[a-z_]+)`")
	exportedName   = regexp.MustCompile(`(?m)^# HELP ((?:eventq|asynq)_[a-z_]+) `)
)

// DocumentedMetrics returns the eventq_ and asynq_ metric names in the table rows of
// docs/operations.md, wherever the test runs from.
func DocumentedMetrics(t testing.TB) map[string]bool {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("testenv: cannot locate the repository to read " + metricsDoc)
	}
	path := filepath.Join(filepath.Dir(file), "..", "..", filepath.FromSlash(metricsDoc))
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "|") {
			continue
		}
		for _, m := range documentedName.FindAllStringSubmatch(line, -1) {
			names[m[1]] = true
		}
	}
	if len(names) == 0 {
		t.Fatalf("testenv: no metric names in the table rows of %s", metricsDoc)
	}
	return names
}

// ExportedMetrics GETs url, a Prometheus /metrics endpoint, and returns the eventq_ and asynq_
// metric families it serves (those with a # HELP line), in the order served.
func ExportedMetrics(t testing.TB, url string) []string {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("GET %s: %d %s", url, res.StatusCode, res.Header.Get("Content-Type"))
	}
	var names []string
	for _, m := range exportedName.FindAllStringSubmatch(string(body), -1) {
		names = append(names, m[1])
	}
	return names
}

// MustDocumentExportedMetrics fails t unless every eventq_ and asynq_ metric family served at
// url is in the metrics table of docs/operations.md, and the families in want are among them
// (so that an empty or foreign endpoint does not pass). process names the exporter in failures.
func MustDocumentExportedMetrics(t testing.TB, process, url string, want ...string) {
	t.Helper()
	documented := DocumentedMetrics(t)
	exported := ExportedMetrics(t, url)
	for _, name := range exported {
		if !documented[name] {
			t.Errorf("%s is exported by the %s but not in the table of %s", name, process, metricsDoc)
		}
	}
	for _, name := range want {
		if !slices.Contains(exported, name) {
			t.Errorf("the %s does not export %s; it exports %q", process, name, exported)
		}
	}
}
