package main

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/eventq/eventq/internal/clock"
	"github.com/eventq/eventq/models"
)

var tokenKeys = []string{"id", "token"}

var tokenRe = regexp.MustCompile(`^\{"id":"([1-9][0-9]*)","token":"([1-9][0-9]*)\|([A-Za-z0-9]{40}[0-9a-f]{8})"\}$`)

// mustToken creates a token with args appended to "token create --tenant ID" and returns its
// id, its secret and its row.
func (e *cliEnv) mustToken(t *testing.T, tenantID string, args ...string) (id, secret string, row models.PersonalAccessToken) {
	t.Helper()
	raw := e.MustRun(t, append([]string{"token", "create", "--tenant", tenantID}, args...)...)
	mustObjectKeys(t, raw, tokenKeys)
	m := tokenRe.FindStringSubmatch(string(raw))
	if m == nil {
		t.Fatalf("stdout %s does not match %s", raw, tokenRe)
	}
	if m[1] != m[2] {
		t.Fatalf("token %s|… does not start with its id %s", m[2], m[1])
	}
	if err := e.db.Where("id = ?", m[1]).Take(&row).Error; err != nil {
		t.Fatalf("token row %s: %v", m[1], err)
	}
	return m[1], m[3], row
}

func TestTokenCreate(t *testing.T) {
	t.Run("stores the hash of the secret with default abilities", func(t *testing.T) {
		e := newCLI(t)
		tenant := e.mustTenant(t, "Acme")
		id, secret, row := e.mustToken(t, tenant)
		sum := sha256.Sum256([]byte(secret))
		if row.Token != hex.EncodeToString(sum[:]) {
			t.Errorf("token column %q, want hex sha256 of the secret %q", row.Token, hex.EncodeToString(sum[:]))
		}
		if models.FormatID(row.ID) != id || models.FormatID(row.TokenableID) != tenant || row.TokenableType != `App\Models\Tenant` {
			t.Errorf("row = %+v, want id %s tokenable App\\Models\\Tenant %s", row, id, tenant)
		}
		if row.Abilities == nil || *row.Abilities != `["*"]` {
			t.Errorf("abilities = %v, want [\"*\"]", deref(row.Abilities))
		}
		if row.ExpiresAt != nil {
			t.Errorf("expires_at = %v, want NULL", row.ExpiresAt)
		}
		if row.Name != "api" {
			t.Errorf("name = %q, want the default api", row.Name)
		}
	})

	t.Run("stores the given abilities and name", func(t *testing.T) {
		e := newCLI(t)
		tenant := e.mustTenant(t, "Acme")
		_, _, row := e.mustToken(t, tenant, "--abilities", "events:read, events:delete", "--name", "reader")
		if row.Abilities == nil || *row.Abilities != `["events:read","events:delete"]` {
			t.Errorf("abilities = %v, want [\"events:read\",\"events:delete\"]", deref(row.Abilities))
		}
		if row.Name != "reader" {
			t.Errorf("name = %q, want reader", row.Name)
		}
	})

	t.Run("issues distinct tokens", func(t *testing.T) {
		e := newCLI(t)
		tenant := e.mustTenant(t, "Acme")
		id1, s1, _ := e.mustToken(t, tenant)
		id2, s2, _ := e.mustToken(t, tenant)
		if id1 == id2 || s1 == s2 {
			t.Errorf("two tokens share id or secret: %s|%s and %s|%s", id1, s1, id2, s2)
		}
	})

	for _, tc := range []struct {
		expiresIn string
		want      time.Duration
	}{
		{"24h", 24 * time.Hour},
		{"30d", 30 * 24 * time.Hour},
		{"90m", 90 * time.Minute},
	} {
		t.Run("sets expires_at from --expires-in "+tc.expiresIn, func(t *testing.T) {
			e := newCLI(t)
			now := time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC) // the CLI's clock, injected
			e.clock = clock.NewFake(now)
			tenant := e.mustTenant(t, "Acme")
			_, _, row := e.mustToken(t, tenant, "--expires-in", tc.expiresIn)
			if row.ExpiresAt == nil {
				t.Fatal("expires_at is NULL")
			}
			if want := now.Add(tc.want); !row.ExpiresAt.Equal(want) {
				t.Errorf("expires_at = %v, want %v", row.ExpiresAt, want)
			}
		})
	}

	for _, tc := range []struct {
		name    string
		args    []string
		wantMsg string
	}{
		{"fails on an unknown ability", []string{"--abilities", "events:read,events:admin"}, "events:admin"},
		{"fails on empty abilities", []string{"--abilities", " , "}, "--abilities"},
		{"fails on a bad duration", []string{"--expires-in", "tomorrow"}, "--expires-in"},
		{"fails on a zero duration", []string{"--expires-in", "0d"}, "--expires-in"},
		{"fails on a negative duration", []string{"--expires-in", "-1h"}, "--expires-in"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newCLI(t)
			tenant := e.mustTenant(t, "Acme")
			stderr := e.MustFail(t, append([]string{"token", "create", "--tenant", tenant}, tc.args...)...)
			if !strings.Contains(stderr, tc.wantMsg) {
				t.Errorf("stderr %q does not mention %s", stderr, tc.wantMsg)
			}
			if n := e.count(t, &models.PersonalAccessToken{}); n != 0 {
				t.Errorf("%d token rows, want 0", n)
			}
		})
	}

	t.Run("fails for an unknown tenant", func(t *testing.T) {
		e := newCLI(t)
		e.MustFail(t, "token", "create", "--tenant", "999999")
		e.MustFail(t, "token", "create", "--tenant", "acme")
		e.MustFail(t, "token", "create")
	})
}

func TestTokenRevoke(t *testing.T) {
	t.Run("deletes the row", func(t *testing.T) {
		e := newCLI(t)
		tenant := e.mustTenant(t, "Acme")
		id, _, _ := e.mustToken(t, tenant)
		keep, _, _ := e.mustToken(t, tenant)
		raw := e.MustRun(t, "token", "revoke", "--id", id)
		mustObjectKeys(t, raw, []string{"id", "revoked"})
		if want := `{"id":"` + id + `","revoked":true}`; string(raw) != want {
			t.Errorf("stdout %s, want %s", raw, want)
		}
		if n := e.count(t, &models.PersonalAccessToken{}, "id = ?", id); n != 0 {
			t.Errorf("revoked token row still there")
		}
		if n := e.count(t, &models.PersonalAccessToken{}, "id = ?", keep); n != 1 {
			t.Errorf("the other token was deleted too")
		}
	})

	t.Run("fails a second time", func(t *testing.T) {
		e := newCLI(t)
		id, _, _ := e.mustToken(t, e.mustTenant(t, "Acme"))
		e.MustRun(t, "token", "revoke", "--id", id)
		e.MustFail(t, "token", "revoke", "--id", id)
	})

	t.Run("fails for an unknown id", func(t *testing.T) {
		e := newCLI(t)
		e.mustToken(t, e.mustTenant(t, "Acme"))
		e.MustFail(t, "token", "revoke", "--id", "999999")
		e.MustFail(t, "token", "revoke", "--id", "abc")
		e.MustFail(t, "token", "revoke")
	})
}

func deref(s *string) any {
	if s == nil {
		return nil
	}
	return *s
}
