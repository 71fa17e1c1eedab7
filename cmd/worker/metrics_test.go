package main

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stripe/stripe-go/v76"

	"github.com/eventq/eventq/internal/config"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/jobs"
)

// Every eventq and asynq metric the worker exports on WORKER_METRICS_ADDR is in the operations
// guide, including the labelled ones that appear only once a task has counted an outcome.
func TestExportedMetricsAreDocumented(t *testing.T) {
	r := testenv.StartRedis(t)
	_, dbURL := testenv.DB(t)
	cfg, err := config.Load([]string{"DATABASE_URL=" + dbURL, "REDIS_URL=" + r.URL(), "WORKER_METRICS_ADDR=127.0.0.1:0"})
	testenv.Must(t, err)
	m := startWorker(t, cfg)

	// A checkout session that cannot be fulfilled and a partial refund: each counts an outcome.
	tasks := asynq.NewClientFromRedisClient(r.Client())
	for _, ev := range []struct{ id, typ, object string }{
		{"evt_metrics_1", string(stripe.EventTypeCheckoutSessionCompleted), `{"id":"cs_metrics","object":"checkout.session","payment_status":"paid"}`},
		{"evt_metrics_2", string(stripe.EventTypeChargeRefunded), `{"id":"ch_metrics","object":"charge","amount":1000,"amount_refunded":100}`},
	} {
		payload := fmt.Sprintf(`{"id":%q,"object":"event","type":%q,"data":{"object":%s}}`, ev.id, ev.typ, ev.object)
		task, err := jobs.NewEventTask(ev.id, ev.typ, []byte(payload))
		testenv.Must(t, err)
		_, err = tasks.Enqueue(task)
		testenv.Must(t, err)
	}
	url := "http://" + m.MetricsAddr() + "/metrics"
	testenv.Eventually(t, 20*time.Second, "both tasks count an outcome", func() bool {
		names := testenv.ExportedMetrics(t, url)
		return slices.Contains(names, "eventq_fulfilments_total") && slices.Contains(names, "eventq_revocations_total")
	})
	testenv.MustDocumentExportedMetrics(t, "worker", url, "eventq_events_queued_total", "eventq_psp_reconcile_runs_total", "asynq_queue_size")
}
