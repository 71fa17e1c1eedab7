// Package changes is the feed that keeps the api processes' caches of members and
// entitlements true: every writer appends a change to one Redis stream after its commit, and
// every api process follows the stream and drops what it cached of the change. A process
// that cannot follow the stream (Redis unreachable, the follower not started) caches nothing
// (Follower.Fresh), so an answer is never older than the last change it could have missed.
//
// A stream, not publish/subscribe: a follower reads on from the last entry it saw, so a
// reconnection loses nothing it was sent, and a follower that falls behind catches up.
package changes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/eventq/eventq/internal/clock"
)

// Key is the stream every change is appended to.
const Key = "eventq:changes"

// maxLen bounds the stream (approximately, as XADD MAXLEN ~ does): a follower reads it within
// milliseconds of each append, so it holds far more than any follower is behind.
const maxLen = 100_000

// Kind says what changed.
type Kind string

// The kinds of change.
const (
	// Entitlements: the member (ID) was granted or lost an entitlement.
	Entitlements Kind = "entitlements"
	// Member: the member (ID) was created, changed or erased; Refs are the references to it
	// (its id, "external:" and its former and new external ids) whose cached answers are void.
	Member Kind = "member"
)

// Change is one entry of the feed.
type Change struct {
	Kind   Kind
	Tenant uint64
	ID     uint64
	Refs   []string
}

// Feed appends changes to the stream. It is safe for concurrent use.
type Feed struct {
	rdb redis.UniversalClient
	log *slog.Logger

	mu      sync.Mutex
	waiting []*announcement // not sent yet, in arrival order
	sending bool            // a caller is sending; the others wait for it
}

// announcement is one Announce call's change, and what became of it.
type announcement struct {
	c    Change
	err  error
	done chan struct{} // closed once sent, err set
	lead chan struct{} // closed when this caller is to send what waits
}

// announceTimeout bounds one send of the waiting announcements, whichever caller's context
// it runs under.
const announceTimeout = 2 * time.Second

// NewFeed returns the feed on rdb.
func NewFeed(rdb redis.UniversalClient, log *slog.Logger) *Feed { return &Feed{rdb: rdb, log: log} }

// Announce appends c, after the change was committed, and returns once it is in the stream.
// A failure is logged and returned: the change stands, and processes that cannot read the feed
// do not cache (Follower.Fresh).
//
// Announcements made at the same moment go to Redis together, in one pipeline: a caller that
// finds another sending waits, and the sender hands the sending of everything that queued
// meanwhile to the first of those callers. So concurrent fulfilments cost one round trip
// between them, and none waits for more than the send before its own.
func (f *Feed) Announce(ctx context.Context, c Change) error {
	a := &announcement{c: c, done: make(chan struct{}), lead: make(chan struct{})}
	f.mu.Lock()
	f.waiting = append(f.waiting, a)
	lead := !f.sending
	f.sending = true
	f.mu.Unlock()
	if !lead {
		select {
		case <-a.done:
			return a.err
		case <-a.lead:
		}
	}
	f.send(ctx)
	<-a.done
	return a.err
}

// send appends every waiting announcement in one pipeline, then hands the sending to the
// first that arrived meanwhile, or ends it.
func (f *Feed) send(ctx context.Context) {
	f.mu.Lock()
	batch := f.waiting
	f.waiting = nil
	f.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), announceTimeout)
	cmds, _ := f.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, a := range batch {
			p.XAdd(ctx, &redis.XAddArgs{Stream: Key, MaxLen: maxLen, Approx: true, Values: []any{
				"k", string(a.c.Kind), "t", strconv.FormatUint(a.c.Tenant, 10), "i", strconv.FormatUint(a.c.ID, 10),
				"r", strings.Join(a.c.Refs, "\x00"),
			}})
		}
		return nil
	})
	cancel()
	for i, a := range batch {
		err := errors.New("not sent")
		if i < len(cmds) {
			err = cmds[i].Err()
		}
		if err != nil {
			f.log.Warn("changes: announce failed; followers' caches may hold the old answer until they expire",
				"kind", a.c.Kind, "tenant", a.c.Tenant, "err", err)
			a.err = fmt.Errorf("changes: announce: %w", err)
		}
		close(a.done)
	}

	f.mu.Lock()
	if len(f.waiting) > 0 {
		close(f.waiting[0].lead)
	} else {
		f.sending = false
	}
	f.mu.Unlock()
}

// freshFor is how long after its last successful read a follower counts as following.
const freshFor = 1500 * time.Millisecond

// block is how long one read waits for new entries.
const block = 500 * time.Millisecond

// Follower reads the feed and hands each change to the handlers of its kind. Until Run has
// read the stream once, and whenever a read fails, it is not Fresh and every Reset handler
// is called, so that caches start over. It is safe for concurrent use.
type Follower struct {
	rdb   redis.UniversalClient
	clock clock.Clock
	log   *slog.Logger

	mu       sync.Mutex
	handlers map[Kind][]func(Change)
	resets   []func()
	lastRead atomic.Int64 // unix nanoseconds of the last successful read; 0: none
}

// NewFollower returns a follower of the feed on rdb; Run starts it.
func NewFollower(rdb redis.UniversalClient, clk clock.Clock, log *slog.Logger) *Follower {
	return &Follower{rdb: rdb, clock: clk, log: log, handlers: map[Kind][]func(Change){}}
}

// On registers h for the changes of kind k, and reset for when changes may have been missed.
func (fl *Follower) On(k Kind, h func(Change), reset func()) {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	fl.handlers[k] = append(fl.handlers[k], h)
	fl.resets = append(fl.resets, reset)
}

// Fresh reports whether the follower has read the feed within the last freshFor: a cache may
// keep answers only then. A nil Follower is never fresh.
func (fl *Follower) Fresh() bool {
	if fl == nil {
		return false
	}
	last := fl.lastRead.Load()
	return last != 0 && fl.clock.Now().Sub(time.Unix(0, last)) < freshFor
}

// Run follows the feed until ctx is done. It returns at once then: a read blocked in Redis
// (up to block) is left to end on its own, and applies nothing after it, so that a process's
// shutdown does not wait for it (closing the Redis client ends it too).
func (fl *Follower) Run(ctx context.Context) {
	done := make(chan struct{})
	go func() { defer close(done); fl.follow(ctx) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

func (fl *Follower) follow(ctx context.Context) {
	last := "" // the id read up to; "" until the stream's end is known
	failing := false
	for ctx.Err() == nil {
		var err error
		if last == "" {
			last, err = fl.end(ctx)
		} else {
			last, err = fl.read(ctx, last)
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if !failing {
				fl.log.Warn("changes: cannot read the feed; caching members and entitlements is off until it can", "err", err)
			}
			failing, last = true, ""
			fl.lastRead.Store(0)
			fl.reset()
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
			continue
		}
		if failing {
			fl.log.Info("changes: following the feed again")
			failing = false
		}
		fl.lastRead.Store(fl.clock.Now().UnixNano())
	}
}

// end returns the id of the stream's last entry ("0-0" when it is empty); the caches start
// over from there.
func (fl *Follower) end(ctx context.Context) (string, error) {
	fl.reset()
	msgs, err := fl.rdb.XRevRangeN(ctx, Key, "+", "-", 1).Result()
	if err != nil {
		return "", err
	}
	if len(msgs) == 0 {
		return "0-0", nil
	}
	return msgs[0].ID, nil
}

// read waits up to block for entries after last, applies them and returns the new last id.
func (fl *Follower) read(ctx context.Context, last string) (string, error) {
	streams, err := fl.rdb.XRead(ctx, &redis.XReadArgs{Streams: []string{Key, last}, Count: 1000, Block: block}).Result()
	if errors.Is(err, redis.Nil) {
		return last, nil
	}
	if err != nil {
		return "", err
	}
	if ctx.Err() != nil { // Run has returned
		return "", ctx.Err()
	}
	for _, st := range streams {
		for _, m := range st.Messages {
			fl.apply(parse(m.Values))
			last = m.ID
		}
	}
	return last, nil
}

func (fl *Follower) apply(c Change) {
	fl.mu.Lock()
	hs := fl.handlers[c.Kind]
	fl.mu.Unlock()
	for _, h := range hs {
		h(c)
	}
}

func (fl *Follower) reset() {
	fl.mu.Lock()
	resets := fl.resets
	fl.mu.Unlock()
	for _, r := range resets {
		r()
	}
}

func parse(v map[string]any) Change {
	str := func(k string) string { s, _ := v[k].(string); return s }
	c := Change{Kind: Kind(str("k"))}
	c.Tenant, _ = strconv.ParseUint(str("t"), 10, 64)
	c.ID, _ = strconv.ParseUint(str("i"), 10, 64)
	if r := str("r"); r != "" {
		c.Refs = strings.Split(r, "\x00")
	}
	return c
}
