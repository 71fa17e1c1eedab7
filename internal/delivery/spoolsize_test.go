package delivery

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

// spoolBytesPerEvent spools requests of perRequest rows like row until n events are spooled
// and returns what Redis reports for the tenant's spool list (MEMORY USAGE, all of it) and
// the entries' own bytes (INGEST_SPOOL_MAX_BYTES's measure), per event.
func spoolBytesPerEvent(t *testing.T, rdb *redis.Client, q *eventqueue.Store, tenant uint64, row models.TrackedEvent, perRequest, n int) (redisBytes, entryBytes float64) {
	t.Helper()
	ctx := context.Background()
	lim := eventqueue.SpoolLimits{Events: 1 << 40, TenantEvents: 1 << 40, Bytes: 1 << 40}
	rows := make([]models.TrackedEvent, perRequest)
	for i := range rows {
		rows[i] = row
	}
	total := 0
	for done := 0; done < n; done += perRequest {
		entry := encodeSpoolEntry(nil, rows)
		total += len(entry)
		testenv.Must(t, q.Spool(ctx, tenant, entry, perRequest, lim))
	}
	used, err := rdb.MemoryUsage(ctx, eventqueue.SpoolKey(tenant), 0).Result()
	testenv.Must(t, err)
	return float64(used) / float64(n), float64(total) / float64(n)
}

// The spool's size per event, as docs/operations.md gives it: a browser's page view (a URL
// of 60 bytes, a user agent of 110) one event a request, and twenty a request; and the
// largest event a request may hold. Each stays within what the docs say.
func TestTheSpoolsSizePerEvent(t *testing.T) {
	testenv.OnOneDatabase(t)
	r := testenv.StartRedis(t)
	rdb := r.Client()
	q := eventqueue.New(rdb)
	member := "external:user-4711"
	typical := models.TrackedEvent{ID: "01a220b3-daf2-7654-84d0-e342f53d592d", TenantID: 1, Type: "page_view",
		SessionID: "6f1c2a4e-8d2b-4c1e-9a7f-2b3c4d5e6f70", AudienceMemberID: &member,
		URL: "https://shop.example.com/products/42-blue-shirt?ref=newsletter", PageHostname: "shop.example.com",
		PagePath: "/products/42-blue-shirt", UserAgent: "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Safari/605.1.15",
		IPAddress: "203.0.113.7", EventSequence: 3, CreatedAt: time.Now()}
	largest := typical
	largest.URL = "https://shop.example.com/" + strings.Repeat("a", 2048-25)
	largest.PagePath = "/" + strings.Repeat("a", 2048-26)
	largest.UserAgent = strings.Repeat("u", 512)
	for _, c := range []struct {
		name       string
		row        models.TrackedEvent
		perRequest int
		max        float64 // bytes per event in Redis that the docs promise
	}{
		{"typical, one a request", typical, 1, 512},
		{"typical, twenty a request", typical, 20, 512},
		{"largest, one a request", largest, 1, 6 << 10},
	} {
		tenant := uint64(100 + c.perRequest + len(c.row.URL))
		redisBytes, entryBytes := spoolBytesPerEvent(t, rdb, q, tenant, c.row, c.perRequest, 2000)
		t.Logf("%s: %.0f bytes an event in Redis, %.0f of them the entry's", c.name, redisBytes, entryBytes)
		if redisBytes > c.max || entryBytes > redisBytes {
			t.Errorf("%s: %.0f bytes an event in Redis (entries %.0f), docs say at most %.0f", c.name, redisBytes, entryBytes, c.max)
		}
	}
}
