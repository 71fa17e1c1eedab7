package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/eventq/eventq/internal/eventqueue/queuetest"

	"github.com/eventq/eventq/models"
)

// Erasure is the privacy scenario on one database: a member with MemberEvents stored events
// among TenantEvents of its tenant, QueuedOfMember of them in the queue, erased while tracking
// goes on at a fixed rate.
type Erasure struct {
	Database       string    `json:"database"`
	TenantEvents   int       `json:"tenant_events"`
	MemberEvents   int       `json:"member_events"`
	QueuedOfMember int       `json:"queued_of_member"`
	Seconds        float64   `json:"seconds_to_done"`
	Deleted        int64     `json:"events_deleted"`
	Redacted       int64     `json:"events_redacted"`
	Alone          Latency   `json:"ingest_alone"`        // the lower p99 of AloneBefore and AloneAfter
	AloneBefore    Latency   `json:"ingest_alone_before"` // before the erasure was requested
	AloneAfter     Latency   `json:"ingest_alone_after"`  // once it was done
	DuringBySecond []float64 `json:"ingest_during_p99_by_second"`
	During         Latency   `json:"ingest_during"`
	RatioP99       float64   `json:"ratio_p99"`
	// On Postgres, by second of the erasure: the WAL written and the checkpoints begun (timed
	// or requested), which the p99 by second is read against.
	WALMiBBySecond      []float64 `json:"wal_mib_by_second,omitempty"`
	CheckpointsBySecond []int64   `json:"checkpoints_by_second,omitempty"`
	// The disk by second during the erasure and during the run alone after it.
	DiskBySecond       []DiskSecond `json:"disk_by_second,omitempty"`
	AloneAfterBySecond []float64    `json:"ingest_alone_after_p99_by_second,omitempty"`
	DiskAfterBySecond  []DiskSecond `json:"disk_after_by_second,omitempty"`
	SlowestRedisMs     float64      `json:"slowest_redis_command_ms"`
	SlowestCommand     string       `json:"slowest_redis_command"`
	TargetSeconds      float64      `json:"target_seconds_max"`
	TargetRatio        float64      `json:"target_ratio_max"`
	TargetRedisMs      float64      `json:"target_redis_ms_max"`
	Met                bool         `json:"met"`
}

// erasurePlan sizes the scenario. The member is named on one session in ten of the fill's
// sessions of five events: memberEvents is a tenth of tenantEvents.
type erasurePlan struct {
	tenantEvents, memberEvents, queued int
	rate                               float64 // tracking requests a second beside
	aloneFor                           time.Duration
	minimise                           minimisePlan // measured after the erasure, on the same services
}

var (
	fullErasure  = erasurePlan{tenantEvents: 1_000_000, memberEvents: 100_000, queued: 20_000, rate: 200, aloneFor: 5 * time.Second, minimise: fullMinimise}
	quickErasure = erasurePlan{tenantEvents: 20_000, memberEvents: 2_000, queued: 400, rate: 100, aloneFor: time.Second, minimise: quickMinimise}
)

// runErasurePhase measures the erasure, then minimisation's cost (Minimise), on Postgres and on
// SQLite, each on a database of its own.
func runErasurePhase(ctx context.Context, s *stack, p erasurePlan, rep *Report) error {
	pg, err := s.postgresDatabase("erasure")
	if err != nil {
		return err
	}
	for _, url := range []string{pg, s.sqliteDatabase("erasure")} {
		if err := s.startServices(ctx, url); err != nil {
			return err
		}
		var res *Erasure
		var min *Minimise
		dbName, _, _ := strings.Cut(s.phase, "-")
		err := s.measure("erasure "+dbName, func() (err error) {
			if res, err = benchErasure(ctx, s, p); err == nil {
				min, err = benchMinimise(ctx, s, res.Database, p.minimise)
			}
			return
		})
		s.stopServices()
		if err != nil {
			return err
		}
		rep.Erasure = append(rep.Erasure, res)
		rep.Minimise = append(rep.Minimise, min)
	}
	return nil
}

func benchErasure(ctx context.Context, s *stack, p erasurePlan) (*Erasure, error) {
	dbName, _, _ := strings.Cut(s.phase, "-")
	res := &Erasure{Database: dbName, TenantEvents: p.tenantEvents, MemberEvents: p.memberEvents, QueuedOfMember: p.queued,
		TargetSeconds: 60, TargetRatio: 1.5, TargetRedisMs: 50}
	t, err := s.seedTenant(ctx, "", true)
	if err != nil {
		return nil, err
	}
	m := models.AudienceMember{TenantID: t.ID, Email: "erased@example.com", CreatedAt: time.Now(), UpdatedAt: time.Now()}
	if err := s.db.WithContext(ctx).Create(&m).Error; err != nil {
		return nil, err
	}
	s.logf("erasure %s: %d events, %d of them the member's (%d queued)", s.phase, p.tenantEvents, p.memberEvents, p.queued)
	to := time.Now().UTC().Add(-time.Hour)
	if err := fillEvents(ctx, s.dbURL, s.db, t.ID, p.tenantEvents, to.AddDate(0, 0, -3), to); err != nil {
		return nil, err
	}
	// The member is named by every event of one session in ten (sessions of five events):
	// memberEvents events, in sessions of its own, spread over the three days.
	for k := 0; k*5 < p.tenantEvents; k += 10 * 500 {
		var sessions []string
		for j := k; j < k+10*500 && j*5 < p.tenantEvents; j += 10 {
			sessions = append(sessions, fmt.Sprintf("s-%08x", j))
		}
		err := s.db.WithContext(ctx).Exec(`UPDATE tracked_events SET audience_member_id = ? WHERE tenant_id = ? AND session_id IN ?`,
			models.FormatID(m.ID), t.ID, sessions).Error
		if err != nil {
			return nil, err
		}
	}
	if err := settleFilled(ctx, s); err != nil { // as a database that has been running would be
		return nil, err
	}
	var rows []models.TrackedEvent
	if err := s.db.WithContext(ctx).Where("tenant_id = ? AND audience_member_id = ?", t.ID, models.FormatID(m.ID)).
		Order("created_at, id").Limit(p.queued).Find(&rows).Error; err != nil {
		return nil, err
	}
	for start := 0; start < len(rows); start += 5000 {
		var els [][]byte
		for i := start; i < min(start+5000, len(rows)); i++ {
			els = append(els, rows[i].MarshalQueue())
		}
		if err := queuetest.Append(ctx, s.rdb, t.ID, els...); err != nil {
			return nil, err
		}
	}
	var member int64
	s.db.WithContext(ctx).Model(&models.TrackedEvent{}).Where("tenant_id = ? AND audience_member_id = ?", t.ID, models.FormatID(m.ID)).Count(&member)
	res.MemberEvents = int(member)

	other, err := s.seedTenant(ctx, "", false) // the tracking beside: another tenant
	if err != nil {
		return nil, err
	}
	post := poster(s, "/api/track", trackBodies(other.SiteKey, 1, 64))
	alone := openLoop{Rate: p.rate, N: int(p.rate * p.aloneFor.Seconds()), Do: post}.run(ctx)
	res.AloneBefore = summarize(alone.Lat)

	s.rdb.ConfigSet(ctx, "slowlog-log-slower-than", "1000")
	s.rdb.SlowLogReset(ctx)
	req := s.request(ctx, "DELETE", fmt.Sprintf("/api/platform/members/%d", m.ID), t.Token, nil)
	start := time.Now()
	r, err := s.http.Do(req)
	if err != nil {
		return nil, err
	}
	var body struct {
		Data struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	json.NewDecoder(r.Body).Decode(&body)
	r.Body.Close()
	if r.StatusCode != http.StatusAccepted {
		return nil, fmt.Errorf("erase: %d", r.StatusCode)
	}
	// Tracking at the same rate until the erasure is done.
	loadCtx, stopLoad := context.WithCancel(ctx)
	during := make(chan loadResult, 1)
	go func() { during <- openLoop{Rate: p.rate, N: int(p.rate * 600), Do: post}.run(loadCtx) }()
	stopDisk := sampleDisk(loadCtx, s)
	sampled := make(chan struct{})
	if strings.HasPrefix(s.dbURL, "postgres") {
		go func() {
			defer close(sampled)
			res.WALMiBBySecond, res.CheckpointsBySecond = walBySecond(loadCtx, s)
		}()
	} else {
		close(sampled)
	}
	var e models.MemberErasure
	for {
		if err := s.db.WithContext(ctx).Where("member_id = ?", m.ID).Take(&e).Error; err != nil {
			stopLoad()
			return nil, err
		}
		if e.Status == models.ErasureDone {
			break
		}
		if time.Since(start) > 10*time.Minute {
			stopLoad()
			return nil, fmt.Errorf("erasure not done after 10 minutes")
		}
		time.Sleep(20 * time.Millisecond)
	}
	res.Seconds = e.CompletedAt.Sub(e.RequestedAt).Seconds()
	stopLoad()
	dr := <-during
	<-sampled
	res.DiskBySecond = stopDisk()
	res.During = summarize(dr.Lat)
	res.DuringBySecond = dr.p99BySecond()
	res.Deleted, res.Redacted = *e.EventsDeleted, *e.EventsRedacted
	if slow, err := s.rdb.SlowLogGet(ctx, 128).Result(); err == nil {
		for _, l := range slow {
			if ms := float64(l.Duration.Microseconds()) / 1000; ms > res.SlowestRedisMs {
				res.SlowestRedisMs, res.SlowestCommand = ms, fmt.Sprint(l.Args[:min(2, len(l.Args))])
			}
		}
	}
	// Alone again, now that the erasure is done: the baseline is the quieter of the two, so
	// that a hiccup of the machine in one of them does not flatter the ratio.
	stopDisk = sampleDisk(ctx, s)
	after := openLoop{Rate: p.rate, N: int(p.rate * p.aloneFor.Seconds()), Do: post}.run(ctx)
	res.AloneAfter, res.AloneAfterBySecond, res.DiskAfterBySecond = summarize(after.Lat), after.p99BySecond(), stopDisk()
	res.Alone = res.AloneBefore
	if res.AloneAfter.P99 > 0 && res.AloneAfter.P99 < res.Alone.P99 {
		res.Alone = res.AloneAfter
	}
	if res.Alone.P99 > 0 {
		res.RatioP99 = res.During.P99 / res.Alone.P99
	}
	res.Met = res.Seconds <= res.TargetSeconds && res.RatioP99 <= res.TargetRatio && res.SlowestRedisMs <= res.TargetRedisMs
	s.logf("  erasure %s: done in %.1f s (deleted %d, redacted %d); ingestion p99 %.1f ms during, %.1f ms alone (before %.1f, after %.1f); slowest Redis command %.1f ms %s",
		s.phase, res.Seconds, res.Deleted, res.Redacted, res.During.P99, res.Alone.P99, res.AloneBefore.P99, res.AloneAfter.P99, res.SlowestRedisMs, res.SlowestCommand)
	s.logf("  ingestion p99 ms by second during the erasure: %.1f", res.DuringBySecond)
	if res.WALMiBBySecond != nil {
		s.logf("  WAL MiB by second: %.0f; checkpoints begun by second: %d", res.WALMiBBySecond, res.CheckpointsBySecond)
	}
	logDisk(s, "during the erasure", res.DiskBySecond)
	s.logf("  ingestion p99 ms by second alone after: %.1f", res.AloneAfterBySecond)
	logDisk(s, "alone after", res.DiskAfterBySecond)
	return res, nil
}

func (e *Erasure) rows(add func(scenario, metric string, value float64, floor, ratio *float64, target string, met *bool)) {
	v := func(x float64) *float64 { return &x }
	b := func(x bool) *bool { return &x }
	name := fmt.Sprintf("erasure %s (%dk of %dk events, %dk queued)", e.Database, e.MemberEvents/1000, e.TenantEvents/1000, e.QueuedOfMember/1000)
	add(name, fmt.Sprintf("s to done (deleted %d, redacted %d)", e.Deleted, e.Redacted), e.Seconds, nil, nil, "≤ 60 s", b(e.Seconds <= e.TargetSeconds))
	add(name, "ingestion p99 ms during (beside: alone, the quieter of before and after)", e.During.P99, v(e.Alone.P99), v(e.RatioP99), "≤ 1.5×", b(e.RatioP99 <= e.TargetRatio))
	add(name, "slowest Redis command ms (SLOWLOG)", e.SlowestRedisMs, nil, nil, "≤ 50 ms", b(e.SlowestRedisMs <= e.TargetRedisMs))
}

// walBySecond samples, once a second until ctx ends, the WAL Postgres wrote and the
// checkpoints it began in that second.
func walBySecond(ctx context.Context, s *stack) (walMiB []float64, checkpoints []int64) {
	type sample struct {
		WAL         float64
		Checkpoints int64
	}
	read := func() (sample, error) {
		var x sample
		err := s.db.Raw(`SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0') AS wal,
			(SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter) AS checkpoints`).Scan(&x).Error
		return x, err
	}
	last, err := read()
	if err != nil {
		return nil, nil
	}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return walMiB, checkpoints
		case <-t.C:
		}
		now, err := read()
		if err != nil {
			return walMiB, checkpoints
		}
		walMiB = append(walMiB, (now.WAL-last.WAL)/(1<<20))
		checkpoints = append(checkpoints, now.Checkpoints-last.Checkpoints)
		last = now
	}
}
