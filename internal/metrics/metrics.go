// Package metrics defines eventq's Prometheus metrics. Each process builds one Metrics with
// its own registry and hands it to the components that count; a nil *Metrics counts nothing,
// so components work without one.
package metrics

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Webhook outcomes.
const (
	WebhookVerified     = "verified"
	WebhookBadSignature = "bad_signature"
	WebhookIgnoredType  = "ignored_type"
	WebhookEnqueued     = "enqueued"
	WebhookDuplicate    = "duplicate"
	WebhookInboxed      = "inboxed"
	WebhookLost         = "lost"
)

// Metrics holds every collector of one process.
type Metrics struct {
	Registry *prometheus.Registry

	HTTPRequests   *prometheus.CounterVec
	HTTPDuration   *prometheus.HistogramVec
	EventsIngested prometheus.Counter
	EventsQueued   prometheus.Counter
	EventsRead     prometheus.Counter
	EventsTrimmed  prometheus.Counter
	Webhooks       *prometheus.CounterVec
	Fulfilments    *prometheus.CounterVec
	RateLimited    *prometheus.CounterVec
	RateLimitDown  prometheus.Counter
	HeldBack       prometheus.Counter
	FullQueues     *prometheus.GaugeVec
	Revocations    *prometheus.CounterVec
	// ReconcileRuns counts reconciliation runs by outcome ("ok" or "error").
	ReconcileRuns *prometheus.CounterVec
	// ReconcileLastSuccess is the Unix time of the last reconciliation run that succeeded.
	ReconcileLastSuccess prometheus.Gauge
	// ReconcileMissing counts provider events that reconciliation found unprocessed and queued.
	ReconcileMissing prometheus.Counter
	// PruneRuns counts retention runs of the worker by outcome ("ok" or "error").
	PruneRuns *prometheus.CounterVec
	// PruneLastSuccess is the Unix time of the last retention run that succeeded.
	PruneLastSuccess prometheus.Gauge
	// EventsPruned counts stored events deleted by retention.
	EventsPruned prometheus.Counter
	// PartitionsCreated and PartitionsDropped count day partitions of the stored events
	// (Postgres) created ahead and dropped by retention.
	PartitionsCreated prometheus.Counter
	PartitionsDropped prometheus.Counter
	// OldestEventAge is the age in seconds of the oldest stored event, as of the last retention
	// run (0: none stored).
	OldestEventAge prometheus.Gauge

	leaseMetrics
	spoolMetrics
}

// New registers eventq's collectors, plus the Go runtime and process collectors, on a fresh
// registry.
func New() *Metrics {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := &Metrics{
		Registry: reg,
		HTTPRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "eventq_http_requests_total", Help: "HTTP requests by route, method and status.",
		}, []string{"route", "method", "status"}),
		HTTPDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "eventq_http_request_duration_seconds", Help: "HTTP request latency by route and method.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"route", "method"}),
		EventsIngested: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "eventq_events_ingested_total", Help: "Tracked events committed to the database.",
		}),
		EventsQueued: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "eventq_events_queued_total", Help: "Events appended to tenant queues (including worker re-pushes).",
		}),
		EventsRead: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "eventq_events_read_total", Help: "Events returned by GET /api/platform/events.",
		}),
		EventsTrimmed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "eventq_events_trim_requested_total", Help: "Sum of count over accepted DELETE /api/platform/events.",
		}),
		Webhooks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "eventq_webhooks_total", Help: "Provider webhooks by outcome.",
		}, []string{"outcome"}),
		Fulfilments: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "eventq_fulfilments_total", Help: "Fulfilment attempts by outcome.",
		}, []string{"outcome"}),
		RateLimited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "eventq_rate_limited_total", Help: "Requests refused with 429, by route and limit.",
		}, []string{"route", "limit"}),
		RateLimitDown: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "eventq_rate_limit_store_errors_total", Help: "Requests let through unchecked because the rate limit store failed (the check timed out or failed, or did so less than a second before).",
		}),
		HeldBack: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "eventq_events_held_back_total", Help: "Events held back in the database because their tenant's queue was full.",
		}),
		FullQueues: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "eventq_held_queue_length",
			Help: "Queue length of each tenant with events held back, as of the re-pusher's last pass (worker). Only such tenants have a series, so the label set stays small.",
		}, []string{"tenant_id"}),
		Revocations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "eventq_revocations_total", Help: "Refunds and disputes handled, by outcome (revoked, already_revoked, parked, ignored, rejected, error).",
		}, []string{"outcome"}),
		ReconcileRuns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "eventq_psp_reconcile_runs_total", Help: "Reconciliation runs against the provider's event list, by outcome.",
		}, []string{"outcome"}),
		ReconcileLastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "eventq_psp_reconcile_last_success_timestamp_seconds", Help: "Unix time at which the last successful reconciliation run finished (0: none yet).",
		}),
		ReconcileMissing: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "eventq_psp_reconcile_missing_events_total", Help: "Provider events reconciliation found unprocessed (their delivery never came) and queued.",
		}),
		PruneRuns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "eventq_events_prune_runs_total", Help: "Runs of the worker's storage maintenance (partitions ahead, retention), by outcome.",
		}, []string{"outcome"}),
		PruneLastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "eventq_events_prune_last_success_timestamp_seconds", Help: "Unix time at which the last successful storage maintenance run finished (0: none yet).",
		}),
		EventsPruned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "eventq_events_pruned_total", Help: "Stored events deleted by EVENT_RETENTION.",
		}),
		PartitionsCreated: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "eventq_event_partitions_created_total", Help: "Day partitions of the stored events created ahead (Postgres).",
		}),
		PartitionsDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "eventq_event_partitions_dropped_total", Help: "Day partitions of the stored events dropped by EVENT_RETENTION (Postgres).",
		}),
		OldestEventAge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "eventq_events_oldest_age_seconds", Help: "Age of the oldest stored event at the last storage maintenance run (0: none stored).",
		}),
	}
	reg.MustRegister(m.HTTPRequests, m.HTTPDuration, m.EventsIngested, m.EventsQueued, m.EventsRead,
		m.EventsTrimmed, m.Webhooks, m.Fulfilments, m.RateLimited, m.RateLimitDown, m.HeldBack, m.FullQueues,
		m.Revocations, m.ReconcileRuns, m.ReconcileLastSuccess, m.ReconcileMissing,
		m.PruneRuns, m.PruneLastSuccess, m.EventsPruned, m.PartitionsCreated, m.PartitionsDropped, m.OldestEventAge)
	m.leaseMetrics = newLeaseMetrics(reg)
	m.spoolMetrics = newSpoolMetrics(reg)
	for _, o := range []string{"ok", "error"} {
		m.ReconcileRuns.WithLabelValues(o)
		m.PruneRuns.WithLabelValues(o)
	}
	for _, o := range []string{WebhookVerified, WebhookBadSignature, WebhookIgnoredType, WebhookEnqueued, WebhookDuplicate, WebhookInboxed, WebhookLost} {
		m.Webhooks.WithLabelValues(o)
	}
	return m
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry})
}

// Ingested counts n events committed to the database.
func (m *Metrics) Ingested(n int) { add(m, func() prometheus.Counter { return m.EventsIngested }, n) }

// Queued counts n events appended to a tenant queue.
func (m *Metrics) Queued(n int) { add(m, func() prometheus.Counter { return m.EventsQueued }, n) }

// Read counts n events returned to a consumer.
func (m *Metrics) Read(n int) { add(m, func() prometheus.Counter { return m.EventsRead }, n) }

// Trimmed counts a trim of n events.
func (m *Metrics) Trimmed(n int64) {
	add(m, func() prometheus.Counter { return m.EventsTrimmed }, int(n))
}

// Webhook counts one webhook outcome.
func (m *Metrics) Webhook(outcome string) {
	if m != nil {
		m.Webhooks.WithLabelValues(outcome).Inc()
	}
}

// Fulfilment counts one fulfilment outcome.
func (m *Metrics) Fulfilment(outcome string) {
	if m != nil {
		m.Fulfilments.WithLabelValues(outcome).Inc()
	}
}

// Revocation counts one refund or dispute outcome.
func (m *Metrics) Revocation(outcome string) {
	if m != nil {
		m.Revocations.WithLabelValues(outcome).Inc()
	}
}

// Reconciled records one reconciliation run: its outcome, how many missing events it queued,
// and on success its end time.
func (m *Metrics) Reconciled(ok bool, at time.Time, missing int) {
	if m == nil {
		return
	}
	add(m, func() prometheus.Counter { return m.ReconcileMissing }, missing)
	if !ok {
		m.ReconcileRuns.WithLabelValues("error").Inc()
		return
	}
	m.ReconcileRuns.WithLabelValues("ok").Inc()
	m.ReconcileLastSuccess.Set(float64(at.UnixMilli()) / 1000)
}

// Limited counts one request refused by limit on route.
func (m *Metrics) Limited(route, limit string) {
	if m != nil {
		m.RateLimited.WithLabelValues(route, limit).Inc()
	}
}

// RateLimitStoreError counts one rate limit check that could not reach Redis.
func (m *Metrics) RateLimitStoreError() {
	if m != nil {
		m.RateLimitDown.Inc()
	}
}

// Held counts n events held back because their queue was full.
func (m *Metrics) Held(n int) { add(m, func() prometheus.Counter { return m.HeldBack }, n) }

// HeldQueues replaces the eventq_held_queue_length series with lengths, keyed by tenant id.
func (m *Metrics) HeldQueues(lengths map[string]int64) {
	if m == nil {
		return
	}
	m.FullQueues.Reset()
	for tenant, n := range lengths {
		m.FullQueues.WithLabelValues(tenant).Set(float64(n))
	}
}

func add(m *Metrics, c func() prometheus.Counter, n int) {
	if m != nil && n > 0 {
		c().Add(float64(n))
	}
}

// Pruned records rows deleted and day partitions dropped by retention.
func (m *Metrics) Pruned(rows int64, partitions int) {
	add(m, func() prometheus.Counter { return m.EventsPruned }, int(rows))
	add(m, func() prometheus.Counter { return m.PartitionsDropped }, partitions)
}

// PartitionsMade records day partitions created ahead.
func (m *Metrics) PartitionsMade(n int) {
	add(m, func() prometheus.Counter { return m.PartitionsCreated }, n)
}

// Maintained records one storage maintenance run of the worker: its outcome, its time and,
// when it succeeded, the age of the oldest stored event (zero when none is stored).
func (m *Metrics) Maintained(ok bool, at time.Time, oldest time.Duration) {
	if m == nil {
		return
	}
	if !ok {
		m.PruneRuns.WithLabelValues("error").Inc()
		return
	}
	m.PruneRuns.WithLabelValues("ok").Inc()
	m.PruneLastSuccess.Set(float64(at.UnixMilli()) / 1000)
	m.OldestEventAge.Set(oldest.Seconds())
}
