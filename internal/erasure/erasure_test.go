package erasure

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/eventqueue"
	"github.com/eventq/eventq/internal/eventstore"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// An erased member is named by its id and by its former external id, this tenant's only, and
// the external id no longer once a live member has taken it.
func TestErasedNamesTheMemberAndNothingElse(t *testing.T) {
	db, _ := testenv.DB(t)
	ctx := context.Background()
	sh := testenv.MustShop(t, db, "", false)
	other := testenv.MustTenant(t, db, false).ID
	ext := "crm-7"
	testenv.Must(t, db.Create(&models.MemberErasure{TenantID: sh.ID, MemberID: sh.Member.ID, ExternalHash: models.ExternalHash(sh.ID, ext),
		Status: models.ErasureDone, RequestedAt: time.Now()}).Error)

	er, err := LoadErased(ctx, db, sh.ID)
	testenv.Must(t, err)
	id := models.FormatID(sh.Member.ID)
	for ref, want := range map[string]bool{id: true, "external:" + ext: true, models.FormatID(sh.Member.ID + 1): false,
		"external:crm-8": false, "0" + id: false, ext: false, "": false} {
		if got := er.Names(ref, nil); got != want {
			t.Errorf("Names(%q) = %v, want %v", ref, got, want)
		}
	}
	if er.Names("external:"+ext, func(string) bool { return true }) {
		t.Error("a former external id a live member has taken still names the erased member")
	}
	none, err := LoadErased(ctx, db, other)
	testenv.Must(t, err)
	if !none.None() || none.Names(id, nil) {
		t.Error("another tenant's erased members name its members")
	}
	if ExternalTaken(ctx, db, sh.ID, ext) {
		t.Error("an external id no live member has is taken")
	}
}

// A queued event is redacted to its id, type, hostname, sequence and time; its dead letter's
// offset and deliveries stay; an event the matcher does not pick is left as it is.
func TestRedactionKeepsOnlyWhatIsNotPersonal(t *testing.T) {
	member := "42"
	ev := models.QueueEvent{ID: "e1", Type: "page_view", SessionID: "s1", AudienceMemberID: &member, URL: "https://shop.example/a?email=x",
		PageHostname: "shop.example", PagePath: "/a", UserAgent: "ua", IPAddress: "192.0.2.1", EventSequence: 3, CreatedAt: "2006-01-02T15:04:05+00:00"}
	raw, err := json.Marshal(ev)
	testenv.Must(t, err)
	match := matcher([]string{member}, nil)
	out, ok := redactEvent(raw, match)
	if !ok {
		t.Fatal("the member's event was not redacted")
	}
	var got models.QueueEvent
	testenv.Must(t, json.Unmarshal(out, &got))
	want := models.QueueEvent{ID: "e1", Type: "page_view", PageHostname: "shop.example", EventSequence: 3, CreatedAt: ev.CreatedAt}
	if got != want {
		t.Errorf("redacted %+v, want %+v", got, want)
	}
	if _, ok := redactEvent(raw, matcher([]string{"43"}, []string{"s2"})); ok {
		t.Error("another member's event in another session was redacted")
	}
	if _, ok := redactEvent(raw, matcher(nil, []string{"s1"})); !ok {
		t.Error("an event sharing the member's session was not redacted")
	}
	dead := []byte(`{"offset":7,"deliveries":5,"event":` + string(raw) + `}`)
	out, ok = redactDeadLetter(dead, match)
	if !ok || string(out) != `{"offset":7,"deliveries":5,"event":`+string(mustRedact(t, raw, match))+`}` {
		t.Errorf("dead letter redacted as %s, %v", out, ok)
	}
}

func mustRedact(t *testing.T, raw []byte, match func(*models.QueueEvent) bool) []byte {
	t.Helper()
	out, ok := redactEvent(raw, match)
	if !ok {
		t.Fatal("not redacted")
	}
	return out
}

// A run deletes the member's stored events and those of its sessions, counts them, leaves the
// rest, and is done; run again it changes nothing.
func TestRunDeletesTheMembersEventsAndItsSessions(t *testing.T) {
	db, _ := testenv.DB(t)
	r := testenv.StartRedis(t)
	ctx := context.Background()
	sh := testenv.MustShop(t, db, "", false)
	svc := &Service{DB: db, Events: eventstore.New(db), Queue: eventqueue.New(r.Client()), Clock: clock.NewFake(time.Now().Add(time.Hour)),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	member := models.FormatID(sh.Member.ID)
	rows := []models.TrackedEvent{
		row(sh.ID, "s-member", &member), row(sh.ID, "s-member", nil), // the member's, and its session's
		row(sh.ID, "s-other", nil), // someone else's
	}
	testenv.Must(t, svc.Events.Insert(ctx, rows, nil))
	e, err := svc.Request(ctx, &sh.Member)
	testenv.Must(t, err)
	for range 2 {
		testenv.Must(t, svc.Run(ctx, e.TenantID, e.ID))
	}
	var left []models.TrackedEvent
	testenv.Must(t, db.Where("tenant_id = ?", sh.ID).Find(&left).Error)
	if len(left) != 1 || left[0].SessionID != "s-other" {
		t.Fatalf("left %d events (%+v), want only the other session's", len(left), left)
	}
	done, err := svc.Get(ctx, sh.ID, e.ID)
	testenv.Must(t, err)
	if done.Status != models.ErasureDone || done.EventsDeleted == nil || *done.EventsDeleted != 2 {
		t.Errorf("erasure %+v, want done with 2 events deleted", done)
	}
}

func row(tenant uint64, session string, member *string) models.TrackedEvent {
	return models.TrackedEvent{ID: uuid.Must(uuid.NewV7()).String(), TenantID: tenant, Type: "page_view", SessionID: session,
		AudienceMemberID: member, URL: "https://shop.example/", PageHostname: "shop.example", PagePath: "/", CreatedAt: time.Now().UTC()}
}
