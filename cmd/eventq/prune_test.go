package main

import (
	"strings"
	"testing"
	"time"

	"github.com/eventq/eventq/models"
)

func TestEventsPrune(t *testing.T) {
	t.Run("with retention off exits 1 saying so and deletes nothing", func(t *testing.T) {
		e := newCLI(t)
		tenant := e.mustTenant(t, "Acme")
		e.insertEvent(t, tenant, 1, time.Now().AddDate(-1, 0, 0), nil)
		if stderr := e.MustFail(t, "events", "prune"); !strings.Contains(stderr, "EVENT_RETENTION") {
			t.Errorf("stderr %q does not name EVENT_RETENTION", stderr)
		}
		e.MustFail(t, "events", "prune", "--dry-run", "--as-of", "2026-11-23T12:00:00Z")
	})

	t.Run("refuses bad input", func(t *testing.T) {
		e := newCLI(t)
		e.environ = append(e.environ, "EVENT_RETENTION=3d")
		tenant := e.mustTenant(t, "Acme")
		e.insertEvent(t, tenant, 1, time.Now().AddDate(-1, 0, 0), nil)
		for _, asOf := range []string{"yesterday", "2026-11-23", "2026-11-23 12:00:00", ""} {
			if asOf == "" {
				e.MustFail(t, "events", "prune", "--as-of")
				continue
			}
			if stderr := e.MustFail(t, "events", "prune", "--as-of", asOf); !strings.Contains(stderr, "--as-of") {
				t.Errorf("--as-of %q: stderr %q does not name --as-of", asOf, stderr)
			}
		}
		e.MustFail(t, "events", "prune", "extra")
		e.environ = append(e.environ, "EVENT_RETENTION=1d")
		if stderr := e.MustFail(t, "events", "prune"); !strings.Contains(stderr, "EVENT_RETENTION") {
			t.Errorf("stderr %q does not name EVENT_RETENTION", stderr)
		}
	})

	t.Run("deletes the days before the cutoff as of a time, dry run first, idempotent", func(t *testing.T) {
		e := newCLI(t)
		e.environ = append(e.environ, "EVENT_RETENTION=3d")
		tenant, other := e.mustTenant(t, "Acme"), e.mustTenant(t, "Other")
		asOf := time.Date(2026, 11, 23, 9, 30, 0, 0, time.UTC)
		cutoff := time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)
		e.insertEvent(t, tenant, 1, cutoff.AddDate(0, 0, -30), nil)
		e.insertEvent(t, other, 2, cutoff.Add(-time.Second), nil)
		e.insertEvent(t, tenant, 3, cutoff, nil)
		e.insertEvent(t, other, 4, asOf, nil)
		want := map[string]any{"cutoff": "2026-11-20T00:00:00+00:00", "deleted": float64(2)}

		dry := e.MustObject(t, []string{"cutoff", "deleted"}, "events", "prune", "--dry-run", "--as-of", "2026-11-23T10:30:00+01:00")
		if dry["cutoff"] != want["cutoff"] || dry["deleted"] != want["deleted"] {
			t.Errorf("dry run %v, want %v", dry, want)
		}
		if n := e.count(t, &models.TrackedEvent{}); n != 4 {
			t.Fatalf("the dry run deleted: %d events left", n)
		}
		got := e.MustObject(t, []string{"cutoff", "deleted"}, "events", "prune", "--as-of", asOf.Format(time.RFC3339))
		if got["cutoff"] != want["cutoff"] || got["deleted"] != want["deleted"] {
			t.Errorf("prune %v, want %v", got, want)
		}
		var left []string
		if err := e.db.Model(&models.TrackedEvent{}).Order("id").Pluck("id", &left).Error; err != nil {
			t.Fatal(err)
		}
		if len(left) != 2 || !strings.HasSuffix(left[0], "3") || !strings.HasSuffix(left[1], "4") {
			t.Errorf("left %v, want events 3 and 4", left)
		}
		again := e.MustObject(t, []string{"cutoff", "deleted"}, "events", "prune", "--as-of", asOf.Format(time.RFC3339))
		if again["deleted"] != float64(0) {
			t.Errorf("second prune %v, want nothing deleted", again)
		}
	})
}
