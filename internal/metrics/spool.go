package metrics

import "github.com/prometheus/client_golang/prometheus"

// spoolMetrics are the collectors of the ingestion spool (requests kept in Redis while the
// database cannot be reached).
type spoolMetrics struct {
	// EventsSpooled counts events accepted into the spool.
	EventsSpooled prometheus.Counter
	// EventsUnspooled counts spooled events stored in the database by the worker.
	EventsUnspooled prometheus.Counter
}

func newSpoolMetrics(reg *prometheus.Registry) spoolMetrics {
	m := spoolMetrics{
		EventsSpooled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "eventq_ingest_spooled_events_total", Help: "Tracked events kept in the spool because the database could not store them.",
		}),
		EventsUnspooled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "eventq_ingest_unspooled_events_total", Help: "Spooled events stored in the database once it answered again.",
		}),
	}
	reg.MustRegister(m.EventsSpooled, m.EventsUnspooled)
	return m
}

// Spooled counts n events put in the spool.
func (m *Metrics) Spooled(n int) { add(m, func() prometheus.Counter { return m.EventsSpooled }, n) }

// Unspooled counts n spooled events stored.
func (m *Metrics) Unspooled(n int) { add(m, func() prometheus.Counter { return m.EventsUnspooled }, n) }

// SpoolLength serves eventq_ingest_spool_events, read by length at each scrape (the spool is
// shared by every process: each serves the same value).
func (m *Metrics) SpoolLength(length func() float64) {
	if m == nil {
		return
	}
	m.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "eventq_ingest_spool_events", Help: "Tracked events in the spool, waiting for the database.",
	}, length))
}
