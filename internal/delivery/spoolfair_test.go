package delivery

import (
	"context"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

// The spool is shared fairly: a tenant past INGEST_SPOOL_TENANT_MAX is refused (503) while
// the others still spool, and past INGEST_SPOOL_MAX_BYTES every request that would spool is
// refused. The drain gives every count back.
func TestTheSpoolIsSharedFairly(t *testing.T) {
	e, pg := startOutageIngest(t)
	ctx := context.Background()
	flood, quiet := testenv.MustTenant(t, e.DB, true).ID, testenv.MustTenant(t, e.DB, true).ID
	for _, tn := range []uint64{flood, quiet} {
		if _, err := e.Flags.Queues(ctx, tn); err != nil {
			t.Fatal(err)
		}
	}
	e.Ingest.limits.TenantEvents = 4
	two := []Input{input("s", 1), input("s", 2)}
	pg.Halt()
	for i := 0; i < 2; i++ {
		if _, err := e.Ingest.Ingest(ctx, flood, two, Client{}); err != nil {
			t.Fatalf("request %d of the flooding tenant: %v", i, err)
		}
	}
	if _, err := e.Ingest.Ingest(ctx, flood, []Input{input("s", 3)}, Client{}); err != errSpoolFull {
		t.Fatalf("past its share: %v, want errSpoolFull", err)
	}
	if _, err := e.Ingest.Ingest(ctx, quiet, two, Client{}); err != nil {
		t.Fatalf("another tenant: %v", err)
	}
	if n, _ := e.Queue.SpoolEvents(ctx); n != 6 {
		t.Fatalf("spool count %d, want 6 (the refused request not counted)", n)
	}
	t.Run("past the bytes, every tenant is refused", func(t *testing.T) {
		e.Ingest.limits.Bytes = 1 // less than what is spooled already
		defer func() { e.Ingest.limits.Bytes = 0 }()
		if _, err := e.Ingest.Ingest(ctx, quiet, []Input{input("s", 3)}, Client{}); err != errSpoolFull {
			t.Fatalf("past the bytes: %v, want errSpoolFull", err)
		}
	})
	pg.Resume()
	testenv.Eventually(t, 10*time.Second, "the spool drained", func() bool {
		_, err := e.Ingest.Delivery().DrainSpool(ctx, "test")
		return err == nil && e.Rows(t, flood) == 4 && e.Rows(t, quiet) == 2
	})
	rdb := e.Redis.Client()
	for _, key := range []string{eventqueue.SpoolEventsKey, eventqueue.SpoolBytesKey} {
		if v, _ := rdb.Get(ctx, key).Int64(); v != 0 {
			t.Errorf("%s = %d after the drain", key, v)
		}
	}
	for _, tn := range []uint64{flood, quiet} {
		if n, _ := rdb.Exists(ctx, eventqueue.SpoolTenantEventsKey(tn)).Result(); n != 0 {
			if v, _ := rdb.Get(ctx, eventqueue.SpoolTenantEventsKey(tn)).Int64(); v != 0 {
				t.Errorf("tenant %d's spool count %d after the drain", tn, v)
			}
		}
	}
	if _, err := e.Ingest.Ingest(ctx, flood, two, Client{}); err != nil {
		t.Fatalf("after the drain: %v", err)
	}
}

// Events of a member accepted before its erasure and still in the spool are dropped by the
// drain, with every event of their sessions; nothing of the member is stored or queued, and
// the erasure waits for the drain.
func TestSpooledEventsOfAnErasedMemberAreDropped(t *testing.T) {
	e, pg := startOutageIngest(t)
	ctx := context.Background()
	sh := testenv.MustShop(t, e.DB, "", true)
	tenant := sh.ID
	if _, err := e.Flags.Queues(ctx, tenant); err != nil {
		t.Fatal(err)
	}
	member := models.FormatID(sh.Member.ID)
	named := input("s-member", 1)
	named.AudienceMemberID = &member
	pg.Halt()
	ids, err := e.Ingest.Ingest(ctx, tenant, []Input{input("s-member", 2), named, input("s-other", 1)}, Client{UserAgent: "ua", IPAddress: "192.0.2.7"})
	if err != nil {
		t.Fatal(err)
	}
	pg.Resume()
	testenv.Eventually(t, 10*time.Second, "the database answers", func() bool { return e.DB.Exec("SELECT 1").Error == nil })
	// The erasure is requested (its row and the member's blanking), as the api does.
	now := time.Now().UTC()
	testenv.Must(t, e.DB.Model(&models.AudienceMember{}).Where("id = ?", sh.Member.ID).Update("erased_at", now).Error)
	testenv.Must(t, e.DB.Create(&models.MemberErasure{TenantID: tenant, MemberID: sh.Member.ID, Status: models.ErasurePending, RequestedAt: now}).Error)

	if _, err := e.Ingest.Delivery().DrainSpool(ctx, "test"); err != nil {
		t.Fatal(err)
	}
	var stored []models.TrackedEvent
	testenv.Must(t, e.DB.Where("tenant_id = ?", tenant).Find(&stored).Error)
	if len(stored) != 1 || stored[0].ID != ids[2] {
		t.Fatalf("stored %+v, want only %s (another session)", stored, ids[2])
	}
	if got := e.queueIDs(t, tenant); len(got) != 1 || got[0] != ids[2] {
		t.Fatalf("queued %v, want only %s", got, ids[2])
	}
	if n, _ := e.Queue.SpoolEvents(ctx); n != 0 {
		t.Fatalf("spool count %d after the drain", n)
	}
}
