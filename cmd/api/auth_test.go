package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/auth"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

func TestPlatformAuthentication(t *testing.T) {
	e := startAPI(t)
	tn := testenv.MustTenant(t, e.DB, true)
	e.MustTrack(t, tn, pageView("s", 1))
	id, secret, _ := strings.Cut(tn.Token, "|")
	unauth := `{"message":"Unauthenticated."}`

	for _, tc := range []struct{ name, header string }{
		{"no Authorization header", ""},
		{"Basic scheme", "Basic " + tn.Token},
		{"Bearer without token", "Bearer "},
		{"wrong secret", "Bearer " + id + "|" + strings.Repeat("x", len(secret))},
		{"unknown id", "Bearer 999999|" + secret},
		{"non-numeric id", "Bearer abc|" + secret},
		{"secret of another token", "Bearer " + id + "|" + secret[1:]},
	} {
		t.Run("401 for "+tc.name, func(t *testing.T) {
			for _, method := range []string{"GET", "DELETE"} {
				var res response
				if tc.header == "" {
					res = e.Do(t, method, "/api/platform/events?count=1", "", nil)
				} else {
					res = e.Do(t, method, "/api/platform/events?count=1", "", nil, "Authorization", tc.header)
				}
				assertBody(t, res, 401, unauth)
				// The header says what was expected: a bearer token (RFC 6750).
				want := `Bearer error="invalid_token"`
				if tc.header == "" || strings.HasPrefix(tc.header, "Basic") || tc.header == "Bearer " {
					want = `Bearer error="invalid_request", error_description="send Authorization: Bearer <token>"`
				}
				if got := res.Header.Get("WWW-Authenticate"); got != want {
					t.Fatalf("WWW-Authenticate %q, want %q", got, want)
				}
			}
			if n := e.QueueLen(t, tn); n != 1 {
				t.Fatalf("queue length %d, want 1", n)
			}
		})
	}

	t.Run("lower-case bearer and a hash-only token work as in Sanctum", func(t *testing.T) {
		if res := e.Do(t, "GET", "/api/platform/events", "", nil, "Authorization", "bearer "+tn.Token); res.Status != 200 {
			t.Fatalf("%d", res.Status)
		}
		if res := e.Do(t, "GET", "/api/platform/events", secret, nil); res.Status != 200 {
			t.Fatalf("%d", res.Status)
		}
	})

	t.Run("401 for an expired token", func(t *testing.T) {
		past := time.Now().Add(-time.Minute)
		_, expired, err := auth.CreateToken(context.Background(), e.DB, tn.ID, "old", nil, &past)
		if err != nil {
			t.Fatal(err)
		}
		assertBody(t, e.Do(t, "GET", "/api/platform/events", expired, nil), 401, unauth)
	})

	t.Run("403 when the token lacks the ability", func(t *testing.T) {
		_, reader, _ := auth.CreateToken(context.Background(), e.DB, tn.ID, "r", []string{auth.AbilityEventsRead}, nil)
		_, deleter, _ := auth.CreateToken(context.Background(), e.DB, tn.ID, "d", []string{auth.AbilityEventsDelete}, nil)
		if res := e.Do(t, "GET", "/api/platform/events", reader, nil); res.Status != 200 {
			t.Fatalf("reader GET %d", res.Status)
		}
		assertBody(t, e.Do(t, "DELETE", "/api/platform/events?count=1", reader, nil), 403, `{"message":"Invalid ability provided."}`)
		assertBody(t, e.Do(t, "GET", "/api/platform/events", deleter, nil), 403, `{"message":"Invalid ability provided."}`)
		if n := e.QueueLen(t, tn); n != 1 {
			t.Fatalf("queue length %d, want 1", n)
		}
	})

	t.Run("last_used_at is recorded", func(t *testing.T) {
		n, _ := models.ParseID(id)
		testenv.Eventually(t, 5*time.Second, "last_used_at is set", func() bool {
			var row models.PersonalAccessToken
			return e.DB.Take(&row, n).Error == nil && row.LastUsedAt != nil
		})
	})
}

// A token whose row takes the id of a token revoked moments ago (a row copied in from the old
// service, or an id the database reuses) works at once: the cache is keyed by id and secret,
// so the revoked token's cached row cannot stand in for the new one.
func TestNewTokenReusingARevokedIDWorksAtOnce(t *testing.T) {
	e := startAPI(t)
	tn := testenv.MustTenant(t, e.DB, true)
	row, old, err := auth.CreateToken(context.Background(), e.DB, tn.ID, "old", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res := e.Do(t, "GET", "/api/platform/events", old, nil); res.Status != 200 {
		t.Fatalf("old token: %d", res.Status)
	}
	if err := auth.RevokeToken(context.Background(), e.DB, row.ID); err != nil {
		t.Fatal(err)
	}
	secret, err := auth.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	abilities := auth.EncodeAbilities(nil)
	reused := models.PersonalAccessToken{ID: row.ID, TokenableType: models.TenantMorphType, TokenableID: tn.ID,
		Name: "copied", Token: auth.HashSecret(secret), Abilities: &abilities}
	if err := e.DB.Create(&reused).Error; err != nil {
		t.Fatal(err)
	}
	token := fmt.Sprintf("%d|%s", row.ID, secret)
	if res := e.Do(t, "GET", "/api/platform/events", token, nil); res.Status != 200 {
		t.Fatalf("new token with the revoked id refused: %d %s", res.Status, res.Body)
	}
}
