package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// RetentionConfig says how long stored events are kept and how often the worker prunes them.
type RetentionConfig struct {
	// Keep is how long stored events are kept (EVENT_RETENTION: a Go duration or Nd, at least
	// MinRetention, or "off"). Default zero: off, every event is kept.
	Keep time.Duration
	// PruneInterval is how often the worker applies Keep (EVENT_PRUNE_INTERVAL, a Go duration
	// of at least 1s). Default DefaultPruneInterval.
	PruneInterval time.Duration
}

// MinRetention is the shortest EVENT_RETENTION accepted: two days, so that yesterday's events,
// which consumers may still be catching up on, are never pruned.
const MinRetention = 48 * time.Hour

// DefaultPruneInterval is EVENT_PRUNE_INTERVAL's default.
const DefaultPruneInterval = time.Hour

func loadRetention(get func(name, def string) string) (RetentionConfig, error) {
	keep, err := ParseRetention(get("EVENT_RETENTION", "off"))
	if err != nil {
		return RetentionConfig{}, err
	}
	s := get("EVENT_PRUNE_INTERVAL", DefaultPruneInterval.String())
	interval, err := time.ParseDuration(s)
	if err != nil || interval < time.Second {
		return RetentionConfig{}, fmt.Errorf("config: EVENT_PRUNE_INTERVAL: %q is not a duration of at least 1s (e.g. 1h)", s)
	}
	return RetentionConfig{Keep: keep, PruneInterval: interval}, nil
}

// ParseRetention reads an EVENT_RETENTION value: "off" (zero), a Go duration ("720h") or a
// number of days ("30d"), at least MinRetention.
func ParseRetention(s string) (time.Duration, error) {
	if strings.EqualFold(s, "off") {
		return 0, nil
	}
	d, err := parseDays(s)
	if err != nil || d < MinRetention {
		return 0, fmt.Errorf("config: EVENT_RETENTION: %q is not off or a duration of at least 2d (e.g. 30d or 720h)", s)
	}
	return d, nil
}

// parseDays reads a Go duration ("720h") or a number of days ("30d").
func parseDays(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseInt(days, 10, 64)
		if err == nil && (n < 0 || n > 1e6) {
			err = fmt.Errorf("out of range")
		}
		return time.Duration(n) * 24 * time.Hour, err
	}
	return time.ParseDuration(s)
}
