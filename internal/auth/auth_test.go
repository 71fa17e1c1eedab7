package auth_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/eventq/eventq/internal/auth"

	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/internal/testenv"
	"github.com/eventq/eventq/models"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestAuthenticate(t *testing.T) {
	db, _ := testenv.DB(t)
	ctx := context.Background()
	clk := clock.NewFake(time.Now())
	tenant := models.Tenant{Name: "t", SiteKey: "site_auth_test"}
	if err := db.Create(&tenant).Error; err != nil {
		t.Fatal(err)
	}
	token := func(abilities []string, expiresAt *time.Time) string {
		_, plain, err := auth.CreateToken(ctx, db, tenant.ID, "test", abilities, expiresAt)
		if err != nil {
			t.Fatal(err)
		}
		return plain
	}
	valid := token(nil, nil)
	readOnly := token([]string{"events:read"}, nil)
	soon := clk.Now().Add(time.Hour)
	expiring := token(nil, &soon)
	past := clk.Now().Add(-time.Second)
	expired := token(nil, &past)
	id, _, _ := strings.Cut(valid, "|")
	user := models.PersonalAccessToken{TokenableType: "App\\Models\\User", TokenableID: tenant.ID, Name: "u", Token: auth.HashSecret("user-secret")}
	if err := db.Create(&user).Error; err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name      string
		token     string
		ok        bool
		canDelete bool
	}{
		{"valid", valid, true, true},
		{"abilities are kept", readOnly, true, false},
		{"not yet expired", expiring, true, true},
		{"expired", expired, false, false},
		{"wrong secret", id + "|not-the-secret", false, false},
		{"unknown id", "999999|" + strings.SplitN(valid, "|", 2)[1], false, false},
		{"id is not a number", "x|secret", false, false},
		{"empty", "", false, false},
		{"no secret", id + "|", false, false},
		{"no id", "|secret", false, false},
		{"a user's token, not a tenant's", models.FormatID(user.ID) + "|user-secret", false, false},
	}
	a := auth.NewAuthenticator(db, clk, slog.New(slog.DiscardHandler))
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := a.Authenticate(ctx, tc.token)
			if !tc.ok {
				if !errors.Is(err, auth.ErrUnauthenticated) {
					t.Fatalf("got %+v, %v; want auth.ErrUnauthenticated", p, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p.TenantID != tenant.ID || p.Can("events:delete") != tc.canDelete || !p.Can("events:read") {
				t.Fatalf("principal %+v", p)
			}
		})
	}

	t.Run("a token expires by the clock, cached or not", func(t *testing.T) {
		if _, err := a.Authenticate(ctx, expiring); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Hour)
		if _, err := a.Authenticate(ctx, expiring); !errors.Is(err, auth.ErrUnauthenticated) {
			t.Fatalf("after expiry: %v", err)
		}
	})
}

// A revoked token keeps working from another process's cache for less than auth.CacheTTL, then is
// refused: the bound the contract promises, proved on the clock rather than by waiting.
func TestRevocationReachesACachedTokenWithinCacheTTL(t *testing.T) {
	db, _ := testenv.DB(t)
	ctx := context.Background()
	clk := clock.NewFake(time.Now())
	tenant := models.Tenant{Name: "t", SiteKey: "site_auth_revoke"}
	if err := db.Create(&tenant).Error; err != nil {
		t.Fatal(err)
	}
	row, plain, err := auth.CreateToken(ctx, db, tenant.ID, "test", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := auth.NewAuthenticator(db, clk, slog.New(slog.DiscardHandler))
	if _, err := a.Authenticate(ctx, plain); err != nil {
		t.Fatal(err)
	}
	if err := auth.RevokeToken(ctx, db, row.ID); err != nil {
		t.Fatal(err)
	}
	clk.Advance(auth.CacheTTL - time.Millisecond)
	if _, err := a.Authenticate(ctx, plain); err != nil {
		t.Fatalf("still cached: %v", err)
	}
	clk.Advance(time.Millisecond)
	if _, err := a.Authenticate(ctx, plain); !errors.Is(err, auth.ErrUnauthenticated) {
		t.Fatalf("auth.CacheTTL after the revocation: %v", err)
	}
	if auth.CacheTTL >= 4*time.Second {
		t.Fatalf("auth.CacheTTL %s is not within the promised 4 s", auth.CacheTTL)
	}
}

// Close waits for the last_used_at write a first use starts in the background: once Close
// returns, the row has it (a process closing its database right after would otherwise cut the
// write off).
func TestCloseWaitsForTheLastUseWrite(t *testing.T) {
	db, _ := testenv.DB(t)
	ctx := context.Background()
	tenant := models.Tenant{Name: "t", SiteKey: "site_auth_close"}
	if err := db.Create(&tenant).Error; err != nil {
		t.Fatal(err)
	}
	row, plain, err := auth.CreateToken(ctx, db, tenant.ID, "test", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := auth.NewAuthenticator(db, clock.Real{}, slog.New(slog.DiscardHandler))
	if _, err := a.Authenticate(ctx, plain); err != nil {
		t.Fatal(err)
	}
	a.Close()
	var after models.PersonalAccessToken
	if err := db.Take(&after, row.ID).Error; err != nil {
		t.Fatal(err)
	}
	if after.LastUsedAt == nil {
		t.Fatal("last_used_at not written when Close returned")
	}
}

// Guessing costs the database little, and never a real token its cache entry: an id no row
// has costs one lookup per UnknownTTL whatever the secrets tried with it, a wrong secret of a
// real id one lookup (by primary key) per UnknownTTL, and neither is kept with the rows; a
// token created with an id looked up before it existed works once UnknownTTL has passed.
func TestGuessesCostOneLookupPerID(t *testing.T) {
	db, _ := testenv.DB(t)
	ctx := context.Background()
	clk := clock.NewFake(time.Now())
	tenant := models.Tenant{Name: "t", SiteKey: "site_auth_guess"}
	testenv.Must(t, db.Create(&tenant).Error)
	row, plain, err := auth.CreateToken(ctx, db, tenant.ID, "test", nil, nil)
	testenv.Must(t, err)
	var lookups atomic.Int64
	testenv.Must(t, db.Callback().Query().Before("gorm:query").Register("count_token_lookups", func(tx *gorm.DB) {
		if tx.Statement.Table == "personal_access_tokens" {
			lookups.Add(1)
		}
	}))
	defer db.Callback().Query().Remove("count_token_lookups")
	a := auth.NewAuthenticator(db, clk, slog.New(slog.DiscardHandler))
	id := models.FormatID(row.ID)
	for range 2 {
		for i := range 10 {
			if _, err := a.Authenticate(ctx, fmt.Sprintf("%s|guess-%d", id, i)); !errors.Is(err, auth.ErrUnauthenticated) {
				t.Fatalf("guess %d: %v", i, err)
			}
		}
	}
	if n := lookups.Load(); n != 10 {
		t.Fatalf("%d lookups for 10 wrong secrets of one id, each tried twice, want 10", n)
	}
	if _, err := a.Authenticate(ctx, plain); err != nil {
		t.Fatalf("the real token after the guesses: %v", err)
	}
	next := models.FormatID(row.ID + 1)
	lookups.Store(0)
	for i := range 100 {
		if _, err := a.Authenticate(ctx, fmt.Sprintf("%s|guess-%d", next, i)); !errors.Is(err, auth.ErrUnauthenticated) {
			t.Fatal(err)
		}
	}
	if n := lookups.Load(); n != 1 {
		t.Fatalf("%d lookups for 100 secrets of an unknown id, want 1", n)
	}
	created, plain2, err := auth.CreateToken(ctx, db, tenant.ID, "test", nil, nil)
	testenv.Must(t, err)
	if models.FormatID(created.ID) != next {
		t.Fatalf("the database numbered the new token %d, not %s", created.ID, next)
	}
	clk.Advance(auth.UnknownTTL)
	if _, err := a.Authenticate(ctx, plain2); err != nil {
		t.Fatalf("a token created with an id looked up before, UnknownTTL later: %v", err)
	}
}
