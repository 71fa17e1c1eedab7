package members

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/eventq/eventq/internal/apperr"
	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/paginate"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// A member is named by its id, or by "external:" and its external id (percent-encoded in a
// path); any other spelling, another tenant's member, or a value no member can hold is the
// one Not Found, and is never sent to the database as a query it would refuse.
func TestMemberReferences(t *testing.T) {
	db, _ := testenv.DB(t)
	ctx := context.Background()
	s := New(db, clock.Real{}, nil, nil)
	shop, other := testenv.MustShop(t, db, "", false), testenv.MustShop(t, db, "", false)
	m, err := s.Create(ctx, shop.ID, map[string]any{"email": "ada@example.com", "external_id": "user/1"})
	testenv.Must(t, err)
	for _, ref := range []string{models.FormatID(m.ID), "external:user%2F1", "external%3Auser%2F1"} {
		got, err := s.Get(ctx, shop.ID, ref)
		if err != nil || got.ID != m.ID {
			t.Fatalf("Get(%q) = %v, %v", ref, got, err)
		}
		if n, err := s.Resolve(ctx, shop.ID, ref); err != nil || n != m.ID {
			t.Fatalf("Resolve(%q) = %d, %v", ref, n, err)
		}
	}
	for _, ref := range []string{"0" + models.FormatID(m.ID), "+" + models.FormatID(m.ID), "user/1", "external:", "external:%00", "external:%FF",
		"external:" + strings.Repeat("x", 192), "9223372036854775808", "%zz"} {
		if _, err := s.Get(ctx, shop.ID, ref); !errors.Is(err, apperr.ErrNotFound) {
			t.Fatalf("Get(%q): %v, want Not Found", ref, err)
		}
	}
	if _, err := s.Get(ctx, other.ID, models.FormatID(m.ID)); !errors.Is(err, apperr.ErrNotFound) {
		t.Fatalf("another tenant's member: %v", err)
	}
	for _, f := range []Filter{{ExternalID: "\x00"}, {Email: "\xff"}, {ExternalID: "a\x00b", Email: "ada@example.com"}} {
		page, err := s.List(ctx, shop.ID, f, paginate.Request{PerPage: 15})
		if err != nil || len(page.Items) != 0 {
			t.Fatalf("List(%q) = %d items, %v", f, len(page.Items), err)
		}
	}
	page, err := s.List(ctx, shop.ID, Filter{ExternalID: "user/1"}, paginate.Request{PerPage: 15})
	if err != nil || len(page.Items) != 1 || page.Items[0].ID != m.ID {
		t.Fatalf("List by external id: %+v, %v", page.Items, err)
	}
}
