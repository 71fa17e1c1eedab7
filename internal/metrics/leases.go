package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// leaseMetrics are the collectors of shared consumption: leases and dead letters.
type leaseMetrics struct {
	// EventsLeased counts events handed out by lease calls, redeliveries included.
	EventsLeased prometheus.Counter
	// LeaseRedeliveries counts events leased again after a lease expired or was retried.
	LeaseRedeliveries prometheus.Counter
	// LeasedNow is each tenant's events under a live lease, as of its last lease call on this
	// process (take the max across processes).
	LeasedNow *prometheus.GaugeVec
	// DeadLettersAdded counts events moved to the dead letters.
	DeadLettersAdded prometheus.Counter
	// DeadLettersDropped counts dead letters dropped past EVENTQUEUE_MAX_DEAD_LETTERS or after
	// DEAD_LETTER_RETENTION (not those a consumer deleted).
	DeadLettersDropped prometheus.Counter
}

func newLeaseMetrics(reg *prometheus.Registry) leaseMetrics {
	m := leaseMetrics{
		EventsLeased: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "eventq_events_leased_total", Help: "Events handed out by lease calls, redeliveries included.",
		}),
		LeaseRedeliveries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "eventq_lease_redeliveries_total", Help: "Events leased again after their lease expired or was retried.",
		}),
		LeasedNow: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "eventq_leased_events", Help: "A tenant's events under a live lease, as of its last lease call on this process.",
		}, []string{"tenant"}),
		DeadLettersAdded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "eventq_dead_letters_added_total", Help: "Events moved to the dead letters after EVENTQUEUE_MAX_DELIVERIES deliveries.",
		}),
		DeadLettersDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "eventq_dead_letters_dropped_total", Help: "Dead letters dropped past EVENTQUEUE_MAX_DEAD_LETTERS or after DEAD_LETTER_RETENTION.",
		}),
	}
	reg.MustRegister(m.EventsLeased, m.LeaseRedeliveries, m.LeasedNow, m.DeadLettersAdded, m.DeadLettersDropped)
	return m
}

// Leased records one lease call of tenant: n events handed out, redelivered of them leased
// before, live leases after it, and the dead letters it added and dropped.
func (m *Metrics) Leased(tenant uint64, n, redelivered, live, deadAdded, deadDropped int64) {
	if m == nil {
		return
	}
	add(m, func() prometheus.Counter { return m.EventsLeased }, int(n))
	add(m, func() prometheus.Counter { return m.LeaseRedeliveries }, int(redelivered))
	m.LeasedNow.WithLabelValues(strconv.FormatUint(tenant, 10)).Set(float64(live))
	add(m, func() prometheus.Counter { return m.DeadLettersAdded }, int(deadAdded))
	m.DeadDropped(deadDropped)
}

// DeadDropped counts n dead letters dropped by their bounds.
func (m *Metrics) DeadDropped(n int64) {
	add(m, func() prometheus.Counter { return m.DeadLettersDropped }, int(n))
}
