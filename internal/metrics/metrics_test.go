package metrics_test

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/eventq/eventq/internal/metrics"
)

// Every recorder counts what it is given, nothing for zero or less, and nothing at all on a nil
// Metrics (a service built without metrics); the handler serves every series in the text
// format, the outcomes' series from the start at zero.
func TestRecordersCountAndANilMetricsCountsNothing(t *testing.T) {
	m := metrics.New()
	m.Ingested(3)
	m.Ingested(0)
	m.Queued(2)
	m.Trimmed(-1)
	m.Fulfilment("fulfilled")
	m.HeldQueues(map[string]int64{"7": 5})
	m.HeldQueues(map[string]int64{"8": 2}) // replaces the series: tenant 7's queue has room again
	for name, c := range map[string]struct {
		got  float64
		want float64
	}{
		"ingested":  {testutil.ToFloat64(m.EventsIngested), 3},
		"queued":    {testutil.ToFloat64(m.EventsQueued), 2},
		"trimmed":   {testutil.ToFloat64(m.EventsTrimmed), 0},
		"fulfilled": {testutil.ToFloat64(m.Fulfilments.WithLabelValues("fulfilled")), 1},
		"full 8":    {testutil.ToFloat64(m.FullQueues.WithLabelValues("8")), 2},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", name, c.got, c.want)
		}
	}
	if n := testutil.CollectAndCount(m.FullQueues); n != 1 {
		t.Errorf("%d full-queue series, want 1", n)
	}

	var none *metrics.Metrics
	none.Ingested(1)
	none.Fulfilment("fulfilled")
	none.HeldQueues(map[string]int64{"7": 1})

	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{"eventq_events_ingested_total 3", `eventq_webhooks_total{outcome="lost"} 0`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics has no %q", want)
		}
	}
}
