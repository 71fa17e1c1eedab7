package database_test

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/database"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

// fixtureEvent is event n of testdata/glebarez-5d7f977.db, which eventq wrote at commit
// 5d7f977 with its previous SQLite driver (github.com/glebarez/go-sqlite v1.21.2): every
// migration of that version, one tenant, then events 1 to 12 created one at a time.
func fixtureEvent(n int) models.TrackedEvent {
	base := time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)
	ev := models.TrackedEvent{ID: fmt.Sprintf("01a20000-0000-7000-8000-%012d", n), TenantID: 1, Type: "page_view",
		SessionID: fmt.Sprintf("s-%d", n), URL: fmt.Sprintf("https://a.example/%d", n), PageHostname: "a.example",
		PagePath: fmt.Sprintf("/%d", n), UserAgent: "Mozilla/5.0", IPAddress: "203.0.113.7", EventSequence: int64(n),
		Queued: n%2 == 0, QueuePending: n%4 == 0,
		CreatedAt: base.Add(time.Duration(n)*time.Hour + time.Duration(n)*1234567*time.Nanosecond)}
	if n%3 == 0 {
		m := fmt.Sprint(n)
		ev.AudienceMemberID = &m
	}
	return ev
}

// A SQLite file written by the previous driver opens with today's: its rows read back
// unchanged, to the nanosecond, and rows written now store their times as the same text, so
// that the time comparisons of retention and export (text comparisons in SQLite) order old
// and new rows together.
func TestSQLiteFileOfThePreviousDriverReadsAndComparesTheSame(t *testing.T) {
	testenv.OnOneDatabase(t)
	data, err := os.ReadFile(filepath.Join("testdata", "glebarez-5d7f977.db"))
	testenv.Must(t, err)
	path := filepath.Join(t.TempDir(), "eventq.db")
	testenv.Must(t, os.WriteFile(path, data, 0o600))
	db, err := database.Open("sqlite://" + path)
	testenv.Must(t, err)
	t.Cleanup(func() { database.Close(db) })
	testenv.Must(t, database.Migrate(db))

	var want []models.TrackedEvent
	for n := 1; n <= 12; n++ {
		want = append(want, fixtureEvent(n))
	}
	if got := allEvents(t, db); !reflect.DeepEqual(got, want) {
		t.Fatalf("rows of the previous driver read back as\n%+v\nwant\n%+v", got, want)
	}
	var tenant models.Tenant
	testenv.Must(t, db.First(&tenant).Error)
	if at := time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC); !tenant.CreatedAt.Equal(at) {
		t.Errorf("tenant created_at %v, want %v", tenant.CreatedAt, at)
	}

	// Rows written now, each half an hour after an old one.
	for n := 1; n <= 12; n++ {
		ev := fixtureEvent(n)
		ev.ID = fmt.Sprintf("01a20000-0000-7000-9000-%012d", n)
		ev.CreatedAt = ev.CreatedAt.Add(30 * time.Minute)
		testenv.Must(t, db.Create(&ev).Error)
	}
	var oldText, newText string // prefixed, or the driver reads a time-shaped text as a time
	testenv.Must(t, db.Raw("SELECT '@' || created_at FROM tracked_events WHERE id = ?", "01a20000-0000-7000-8000-000000000001").Scan(&oldText).Error)
	testenv.Must(t, db.Raw("SELECT '@' || created_at FROM tracked_events WHERE id = ?", "01a20000-0000-7000-9000-000000000001").Scan(&newText).Error)
	if oldText != "@2026-11-20 11:00:00.001234567+00:00" || newText != "@2026-11-20 11:30:00.001234567+00:00" {
		t.Errorf("created_at stored as %q (previous driver) and %q (now), want the same layout", oldText, newText)
	}
	cutoff := fixtureEvent(6).CreatedAt.Add(time.Minute) // after old 6, before new 6
	var before int64
	testenv.Must(t, db.Model(&models.TrackedEvent{}).Where("created_at < ?", cutoff).Count(&before).Error)
	if before != 11 {
		t.Errorf("%d rows before %v, want 11 (old 1-6, new 1-5)", before, cutoff)
	}
	var order []string
	testenv.Must(t, db.Model(&models.TrackedEvent{}).Order("created_at").Limit(4).Pluck("id", &order).Error)
	wantOrder := []string{"01a20000-0000-7000-8000-000000000001", "01a20000-0000-7000-9000-000000000001",
		"01a20000-0000-7000-8000-000000000002", "01a20000-0000-7000-9000-000000000002"}
	if !reflect.DeepEqual(order, wantOrder) {
		t.Errorf("ordered by created_at: %v, want %v", order, wantOrder)
	}
}
