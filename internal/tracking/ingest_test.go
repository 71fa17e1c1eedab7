package tracking

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/erasure"
	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/internal/eventstore"
	"github.com/eventq/eventq/internal/features"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

// The front end hands delivery rows already minimised: the address shortened for a tenant
// with AnonymizeIp, the redacted parameters' values and the fragment gone, an erased member's
// reference dropped (the erasure seen at once through the tenant's erasure count), and marked
// queued as the tenant's flag says. Each id it answers names a stored row.
func TestIngestHandsOverMinimisedRows(t *testing.T) {
	db, _ := testenv.DB(t)
	r := testenv.StartRedis(t)
	ctx := context.Background()
	queue := eventqueue.New(r.Client())
	flags := features.New(db, clock.Real{})
	in := NewIngestor(db, flags, queue, clock.Real{}, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	t.Cleanup(in.Close)
	sh := testenv.MustShop(t, db, "", true)
	testenv.Must(t, flags.Set(ctx, features.AnonymizeIp, sh.ID, true))
	testenv.Must(t, db.Model(&models.Tenant{}).Where("id = ?", sh.ID).Update("redact_query_params", models.StringList{"email"}).Error)
	svc := &erasure.Service{DB: db, Events: eventstore.New(db), Queue: queue, Clock: clock.Real{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	_, err := svc.Request(ctx, &sh.Member)
	testenv.Must(t, err)

	member := models.FormatID(sh.Member.ID)
	ev := Input{Type: "page_view", SessionID: "s", URL: "https://shop.example/a?email=x@y.example&b=1#top", EventSequence: 1, AudienceMemberID: &member}
	ids, err := in.Ingest(ctx, sh.ID, []Input{ev}, Client{UserAgent: "ua", IPAddress: "203.0.113.7"})
	testenv.Must(t, err)
	var row models.TrackedEvent
	testenv.Must(t, db.Take(&row, "id = ?", ids[0]).Error)
	if row.IPAddress != "203.0.113.0" || row.URL != "https://shop.example/a?email=redacted&b=1" || row.AudienceMemberID != nil || !row.Queued {
		t.Errorf("stored %+v; want the address shortened, the email redacted and the fragment gone, no member, queued", row)
	}
	testenv.Eventually(t, 5*time.Second, "the event is in its queue", func() bool {
		n, err := queue.Len(ctx, sh.ID)
		return err == nil && n == 1
	})
}
