package export

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/eventstore"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

// The events of several members (a member's id and its external id) come out as one stream
// in (created_at, id) order, each once, whatever the page size, ties on created_at broken by
// id, and another member's never.
func TestMembersAreOneStreamOldestFirst(t *testing.T) {
	db, _ := testenv.DB(t)
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var want []string
	for i := range 60 {
		ev := models.TrackedEvent{ID: fmt.Sprintf("0193a5b0-0000-7000-8000-%012d", 1000-i), TenantID: 1, Type: "page_view",
			SessionID: "s", URL: "https://a.example/", PageHostname: "a.example", PagePath: "/", UserAgent: "ua",
			IPAddress: "203.0.113.7", CreatedAt: start.Add(time.Duration(i/3) * time.Second)} // three at each instant
		var name *string
		switch i % 4 {
		case 0, 1:
			name = ptr("42")
		case 2:
			name = ptr("ext-42")
		}
		if i%7 == 0 {
			name = ptr("other") // another member's, never exported
		}
		ev.AudienceMemberID = name
		testenv.Must(t, db.Create(&ev).Error)
	}
	testenv.Must(t, db.Model(&models.TrackedEvent{}).Where("tenant_id = 1 AND audience_member_id IN ?", []string{"42", "ext-42"}).
		Order("created_at, id").Pluck("id", &want).Error)
	if len(want) < 30 {
		t.Fatalf("only %d events of the member", len(want))
	}
	for _, size := range []int{1, 4, 7, 1000} {
		var got []string
		n, err := Each(context.Background(), eventstore.New(db), Query{TenantID: 1, Members: []string{"42", "ext-42"}, PageSize: size},
			func(ev *models.TrackedEvent) error { got = append(got, ev.ID); return nil })
		testenv.Must(t, err)
		if n != len(want) || !reflect.DeepEqual(got, want) {
			t.Errorf("pages of %d: %d events\n got %v\nwant %v", size, n, got, want)
		}
	}
}

func ptr(s string) *string { return &s }
