//go:build bench

// The harness's own test is not part of the default go test run (it takes one to two minutes
// of the machine): make bench-check runs it, and CI does.

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The harness itself, in -quick mode: every scenario runs and reports figures. No timing is
// asserted; the numbers depend on the machine.
func TestQuickRunReportsEveryScenario(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server, Postgres, the api and the worker")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out := filepath.Join(t.TempDir(), "bench.json")
	var table strings.Builder
	if _, err := run(ctx, options{Quick: true, Out: out, Command: "go test ./bench", Stdout: &table, Logf: t.Logf}); err != nil {
		t.Fatal(err)
	}
	t.Log(table.String())

	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("the report is not JSON: %v", err)
	}
	positive := func(name string, v float64) {
		t.Helper()
		if !(v > 0) {
			t.Errorf("%s = %v, want > 0", name, v)
		}
	}
	m := rep.Machine
	positive("machine.nproc", float64(m.NumCPU))
	positive("machine.memory_mib", float64(m.MemoryMiB))
	if m.GoVersion == "" || m.Date == "" || m.RedisVersion == "" || m.PostgresVersion == "" {
		t.Errorf("machine description incomplete: %+v", m)
	}

	if q := rep.QueueRead; q == nil {
		t.Error("no queue_read")
	} else {
		positive("queue_read.api.p50", q.API.P50)
		positive("queue_read.api.p99", q.API.P99)
		positive("queue_read.floor.p50", q.Floor.P50)
		positive("queue_read.raw_resp_first_byte.p50", q.FirstByte.P50)
		if q.FirstByte.P50 > q.RawRESP.P50 {
			t.Errorf("first byte %v ms after the whole reply %v ms", q.FirstByte.P50, q.RawRESP.P50)
		}
		positive("queue_read.ratio", q.Ratio)
		positive("queue_read.event_bytes", float64(q.EventBytes))
		positive("queue_read.static_http.p50", q.StaticHTTP.P50)
		positive("queue_read.ratio_sequential", q.RatioSequential)
		positive("queue_read.cpu_per_read_ms.api", q.CPU.API)
		positive("queue_read.cpu_per_read_ms.redis", q.CPU.Redis)
		positive("queue_read.cpu_per_read_ms.client", q.CPU.Client)
		positive("queue_read.floor_cpu_per_read_ms.total", q.FloorCPU.Total)
		positive("queue_read.core_bound_ms", q.CoreBoundMs)
	}
	if q := rep.QueueReadConc; q == nil {
		t.Error("no queue_read_concurrent")
	} else {
		positive("queue_read_concurrent.api.p99", q.API.P99)
		positive("queue_read_concurrent.api_reads_per_second", q.APIReadsPerSec)
		positive("queue_read_concurrent.floor_reads_per_second", q.FloorReadsPerS)
		positive("queue_read_concurrent.api_peak_rss_mib", q.APIPeakRSSMiB)
	}
	if tr := rep.Trim; tr == nil {
		t.Error("no trim")
	} else {
		positive("trim.api.p50", tr.API.P50)
		positive("trim.floor.p50", tr.Floor.P50)
	}
	seen := map[string]bool{}
	for _, in := range rep.Ingest {
		name := "ingest " + in.Database + " " + map[int]string{1: "1", 50: "50"}[in.EventsPerRequest]
		seen[name] = true
		positive(name+" events_per_second", in.EventsPerSec)
		positive(name+" api.p99", in.API.P99)
		positive(name+" floor_rows_per_second", in.FloorRowsPerSec)
		positive(name+" floor 1-row", in.Floor.Rows1)
		positive(name+" ratio", in.Ratio)
		if in.HTTPFloor == nil || in.At80 == nil || in.NoopAt80 == nil {
			t.Errorf("%s: no HTTP floor or no run at 80%%", name)
			continue
		}
		positive(name+" http_floor.events_per_second", in.HTTPFloor.EventsPerSec)
		positive(name+" ratio_min_floor", in.RatioMin)
		positive(name+" at_80_percent.p99", in.At80.Latency.P99)
		positive(name+" noop_at_80_percent.p99", in.NoopAt80.Latency.P99)
		positive(name+" at_80_percent.machine_cpu", in.At80.MachineCPUMicrosPerReq)
		positive(name+" noop_at_80_percent.machine_cpu", in.NoopAt80.MachineCPUMicrosPerReq)
	}
	for _, want := range []string{"ingest postgres 1", "ingest postgres 50", "ingest sqlite 1", "ingest sqlite 50"} {
		if !seen[want] {
			t.Errorf("no %s", want)
		}
	}
	if w := rep.Webhook; w == nil {
		t.Error("no webhook")
	} else {
		positive("webhook.ok", float64(w.OK))
		positive("webhook.api.p99", w.API.P99)
		positive("webhook.floor.p99", w.Floor.P99)
	}
	if f := rep.Fulfilment; f == nil {
		t.Error("no fulfilment")
	} else {
		positive("fulfilment.committed", float64(f.Committed))
		positive("fulfilment.purchases_per_second", f.PurchasesPerSec)
		positive("fulfilment.webhook_to_purchase.p50", f.Latency.P50)
		positive("fulfilment.floor_transactions_per_second", f.FloorTxPerSec)
		if f.BelowCapacity == nil || f.Capacity == nil {
			t.Error("fulfilment without below_capacity or capacity")
		} else {
			positive("fulfilment.below_capacity.committed", float64(f.BelowCapacity.Committed))
			positive("fulfilment.below_capacity.webhook_to_purchase.p50", f.BelowCapacity.Latency.P50)
			positive("fulfilment.capacity.purchases_per_second", f.Capacity.PurchasesPerSec)
		}
	}
	if l := rep.Limits; l == nil {
		t.Error("no rate_limits")
	} else if n := quickPlan.limits.turns; len(l.IngestOn) != n || len(l.IngestOff) != n || len(l.IngestPairRatios) != n ||
		len(l.ReadOnP50) != 2*n || len(l.ReadOffP50) != 2*n || len(l.ReadPairRatios) != 2*n {
		t.Errorf("rate_limits turns: %d on, %d off, %d pairs, want %d each in -quick; reads %d on, %d off, %d pairs, want %d (both in every turn)",
			len(l.IngestOn), len(l.IngestOff), len(l.IngestPairRatios), n, len(l.ReadOnP50), len(l.ReadOffP50), len(l.ReadPairRatios), 2*n)
	} else {
		for i := range n {
			positive("rate_limits.ingest_on", l.IngestOn[i])
			positive("rate_limits.ingest_off", l.IngestOff[i])
		}
		for i := range 2 * n {
			positive("rate_limits.read_on_median", l.ReadOnP50[i])
			positive("rate_limits.read_off_median", l.ReadOffP50[i])
		}
		positive("rate_limits.ingest_ratio", l.IngestRatio)
		positive("rate_limits.read_ratio", l.ReadRatio)
	}
	if c := rep.Checkpoint; c == nil {
		t.Error("no checkpoint")
	} else if want := quickPlan.checkpoint.turns * quickPlan.checkpoint.commits; c.Loop.N != want || c.Every200.N != want {
		t.Errorf("checkpoint: %d and %d commits, want %d each", c.Loop.N, c.Every200.N, want)
	} else {
		positive("checkpoint.loop.p50", c.Loop.P50)
		positive("checkpoint.every_200ms.p50", c.Every200.P50)
	}
	if o := rep.Outage; o == nil {
		t.Error("no outage")
	} else {
		positive("outage.before.p99", o.Before.P99)
		positive("outage.during.p99", o.During.P99)
		positive("outage.spooled", float64(o.Spooled))
		positive("outage.drain_events_per_second", o.DrainEventsPerSec)
		positive("outage.normal_events_per_second", o.NormalEventsPerSec)
		if o.Failed != 0 {
			t.Errorf("outage: %d requests not answered 202", o.Failed)
		}
	}
	if b := rep.Bombs; b == nil {
		t.Error("no bombs")
	} else {
		positive("bombs.requests", float64(b.Requests))
		positive("bombs.idle_rss", b.IdleRSSMiB)
		positive("bombs.peak_rss", b.PeakRSSMiB)
		if b.Not413 != 0 {
			t.Errorf("bombs: %d requests answered other than 413", b.Not413)
		}
	}
	// Every scenario has its peak RSS: the api's always (every scenario runs one), the worker's
	// where one runs throughout.
	measured := map[string]bool{}
	for _, mp := range rep.Memory {
		measured[mp.Scenario] = true
		positive("memory["+mp.Scenario+"].api_peak_rss_mib", mp.APIMiB)
	}
	for _, name := range []string{"read", "compression", "trim", "ingest-postgres", "ingest-sqlite", "longpoll", "leases", "rebuild postgres",
		"rebuild sqlite", "fulfil", "webhook", "outage", "bombs", "frontdoor", "erasure postgres", "erasure sqlite", "retention", "limits", "citus"} {
		if !measured[name] {
			t.Errorf("no peak RSS for scenario %q (have %v)", name, measured)
		}
	}
	if len(rep.Erasure) != 2 {
		t.Errorf("erasure: %d databases, want postgres and sqlite", len(rep.Erasure))
	}
	for _, er := range rep.Erasure {
		positive("erasure."+er.Database+".seconds", er.Seconds)
		positive("erasure."+er.Database+".deleted", float64(er.Deleted))
		positive("erasure."+er.Database+".redacted", float64(er.Redacted))
		positive("erasure."+er.Database+".during.p99", er.During.P99)
	}
	if len(rep.Minimise) != 2 {
		t.Errorf("minimisation: %d databases, want postgres and sqlite", len(rep.Minimise))
	}
	for _, m := range rep.Minimise {
		positive("minimisation."+m.Database+".on", m.OnMedian)
		positive("minimisation."+m.Database+".off", m.OffMedian)
	}
	if fd := rep.FrontDoor; fd == nil {
		t.Error("no front_door")
	} else {
		positive("front_door.check", fd.Check.RequestsPerSec)
		positive("front_door.floor", fd.Floor.RequestsPerSec)
		positive("front_door.refund_to_404.p50", fd.RevocationLatency.P50)
		positive("front_door.member_creates", fd.CreatesPerSec)
		positive("front_door.list_first.p50", fd.ListFirst.P50)
		positive("front_door.list_deep.p50", fd.ListDeep.P50)
		if fd.RevocationLatency.N != fd.Revocations {
			t.Errorf("front_door: %d of %d refunds measured", fd.RevocationLatency.N, fd.Revocations)
		}
	}
	if l := rep.LongPoll; l == nil {
		t.Error("no long_poll")
	} else {
		positive("long_poll.latency.p99", l.Latency.P99)
		positive("long_poll.rss_waiting", l.RSSWaitingMiB)
		if l.Latency.N != l.Wakeups || l.Errors != 0 {
			t.Errorf("long_poll: %d of %d wake-ups measured, %d errors", l.Latency.N, l.Wakeups, l.Errors)
		}
	}
	if c := rep.Compression; c == nil || len(c.Codings) != 3 {
		t.Errorf("compression: %+v, want identity, gzip and zstd", c)
	} else {
		positive("compression.floor_raw_resp.p50", c.Floor.P50)
		for _, k := range c.Codings {
			positive("compression."+k.Coding+".wire_bytes", float64(k.WireBytes))
			positive("compression."+k.Coding+".ratio_median", k.Ratio)
			if k.Coding != "identity" {
				positive("compression."+k.Coding+".codec_ms", k.CodecMs)
				positive("compression."+k.Coding+".ratio_to_bound", k.BoundRatio)
			}
		}
		if !(c.Codings[1].WireBytes < c.Codings[0].WireBytes && c.Codings[2].WireBytes < c.Codings[0].WireBytes) {
			t.Errorf("compressed pages are not smaller: %+v", c.Codings)
		}
	}
	if len(rep.Rebuild) != 2 {
		t.Errorf("rebuild: %d databases, want postgres and sqlite", len(rep.Rebuild))
	}
	for _, rb := range rep.Rebuild {
		positive("rebuild."+rb.Database+".events_per_second", rb.EventsPerSec)
	}
	if rt := rep.Retention; rt == nil {
		t.Error("no retention")
	} else {
		if len(rt.Prune) != 2 {
			t.Errorf("retention: prune under load on %d databases, want postgres and sqlite", len(rt.Prune))
		}
		for _, p := range rt.Prune {
			name := "retention.prune." + p.Database
			positive(name+".filled", float64(p.Filled))
			positive(name+".prune_seconds", p.PruneSeconds)
			positive(name+".during.p99", p.During.Latency.P99)
			positive(name+".during.events_per_second", p.During.EventsPerSec)
			positive(name+".baseline_p99", p.BaselineP99)
			positive(name+".p99_ratio", p.P99Ratio)
			if len(p.Alone) != 2 {
				t.Errorf("%s: %d runs alone, want 2", name, len(p.Alone))
			}
			if p.Deleted != p.Filled {
				t.Errorf("%s: deleted %d of the %d events in the pruned days", name, p.Deleted, p.Filled)
			}
			if p.Database == "postgres" && p.PartitionsDropped == 0 {
				t.Errorf("%s: no partition dropped", name)
			}
		}
		if d := rt.DropVsDelete; d == nil {
			t.Error("no retention.drop_vs_delete")
		} else {
			positive("retention.drop_vs_delete.rows", float64(d.Rows))
			positive("retention.drop_vs_delete.drop_seconds", d.DropSeconds)
			positive("retention.drop_vs_delete.delete_seconds", d.DeleteSeconds)
		}
		if in := rt.Insert; in == nil {
			t.Error("no retention.partitioned_insert")
		} else {
			positive("retention.partitioned_insert.ratio", in.Ratio)
			positive("retention.partitioned_insert.with_brin", in.WithBRIN)
			positive("retention.partitioned_insert.with_btree", in.WithBTree)
		}
		if len(rt.Export) != 4 {
			t.Errorf("retention.export: %d runs, want jsonl and parquet of 2 tenants (not measured: %q)", len(rt.Export), rt.NotMeasured)
		}
		for _, e := range rt.Export {
			positive("retention.export."+e.Format+".events_per_second", e.EventsPerSec)
			positive("retention.export."+e.Format+".peak_rss_mib", e.PeakRSSMiB)
		}
		if m := rt.Migration; m == nil {
			t.Error("no retention.migration")
		} else {
			positive("retention.migration.seconds_per_million_rows", m.SecondsPerMillion)
			if m.RowsAfter != m.Rows {
				t.Errorf("retention.migration: %d rows before, %d after", m.Rows, m.RowsAfter)
			}
		}
	}
	if l := rep.Leases; l == nil {
		t.Error("no leases")
	} else {
		if len(l.Runs) != 4 {
			t.Errorf("leases: %d throughput runs, want 1, 2, 4 and 8 consumers", len(l.Runs))
		}
		positive("leases.floor_get_delete_events_per_second", l.FloorEventsPerS)
		for _, r := range l.Runs {
			positive(fmt.Sprintf("leases.runs[%d consumers].events_per_second", r.Consumers), r.EventsPerSec)
		}
		if len(l.PerIDRuns) != 2 {
			t.Errorf("leases: %d per-id runs, want 1 and 8 consumers", len(l.PerIDRuns))
		}
		for _, r := range l.PerIDRuns {
			positive(fmt.Sprintf("leases.per_id_runs[%d consumers].events_per_second", r.Consumers), r.EventsPerSec)
		}
		positive("leases.single_ratio", l.SingleRatio)
		positive("leases.eight_ratio", l.EightRatio)
		positive("leases.store_lease_per_id_ack_events_per_second", l.StorePerIDEventsPerS)
		positive("leases.work_one.events_per_second", l.WorkOne.EventsPerSec)
		positive("leases.work_four.events_per_second", l.WorkFour.EventsPerSec)
		positive("leases.store_lease_ack_events_per_second", l.StoreLeaseEventsPerS)
		positive("leases.store_read_trim_events_per_second", l.StoreReadEventsPerS)
		positive("leases.lease_100_at_cap.p99", l.AtCap.P99)
		positive("leases.lease_1000_reclaiming_expired.p99", l.Reclaim.P99)
		// used_memory's change is reported, not checked: it is noise around the keys' ~1 KB.
		positive("leases.redis_lease_keys_bytes_per_leased", l.KeysPerLeased)
	}
	if len(rep.Rows) == 0 {
		t.Error("the report has no table")
	}
}
