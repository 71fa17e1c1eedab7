package models

import (
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// TrackedEvent is one event recorded through the client library. Every event is stored;
// Queued marks an event that belongs in its tenant's queue (the flag was active when it was
// accepted), QueuePending one that is not known to be there yet (the worker pushes those).
// An event tracked through the API is not marked: a PendingBatch committed with it stands for
// the mark until the event is in its queue.
type TrackedEvent struct {
	ID               string    `gorm:"primaryKey;size:36"`
	TenantID         uint64    `gorm:"not null;index:tracked_events_tenant_created,priority:1"`
	Type             string    `gorm:"size:64;not null"`
	SessionID        string    `gorm:"size:128;not null"`
	AudienceMemberID *string   `gorm:"size:255"`
	URL              string    `gorm:"type:text;not null"`
	PageHostname     string    `gorm:"size:255;not null"`
	PagePath         string    `gorm:"type:text;not null"`
	UserAgent        string    `gorm:"type:text;not null"`
	IPAddress        string    `gorm:"size:45;not null"`
	EventSequence    int64     `gorm:"not null"`
	Queued           bool      `gorm:"not null;default:false"`
	QueuePending     bool      `gorm:"not null;default:false"` // indexed where true: PendingIndex
	CreatedAt        time.Time `gorm:"index:tracked_events_tenant_created,priority:2"`
}

// PendingIndex is the index of the events marked QueuePending, and of those alone: the
// re-pusher and a held tenant's drain find them through it, oldest first. Rows not marked
// (nearly all of them) have no entry. Queries must say `queue_pending` as written in its
// predicate, not `queue_pending = ?`: the planner uses a partial index only for a query whose
// condition implies the index's, which a parameter does not (Postgres's cached generic plan)
// and `= 1` does not (SQLite).
const PendingIndex = "idx_tracked_events_pending"

// PendingBatch stands for the pending marks of one tenant's queued events that were committed
// together, in the same transaction as the batch. It is deleted once they are in their queue,
// or turned into marks on the rows (TrackedEvent.QueuePending) by whoever deletes it otherwise:
// one row written and deleted for a batch instead of an UPDATE of every event.
type PendingBatch struct {
	ID       string    `gorm:"primaryKey;size:36"`
	TenantID uint64    `gorm:"not null"`
	EventIDs string    `gorm:"type:text;not null"` // comma-separated, in order
	FirstAt  time.Time `gorm:"not null"`           // the events' created_at bounds
	LastAt   time.Time `gorm:"not null"`
	// CreatedAt is when the batch was committed: the re-pusher takes batches older than a
	// minimum age (their process died or failed to append them).
	CreatedAt time.Time `gorm:"not null;index"`
}

// Events is the ids of b's events, in order.
func (b *PendingBatch) Events() []string { return strings.Split(b.EventIDs, ",") }

// Len is how many events b stands for.
func (b *PendingBatch) Len() int { return strings.Count(b.EventIDs, ",") + 1 }

// QueueEvent is the JSON shape of an event in a queue and in every API response.
type QueueEvent struct {
	ID               string  `json:"id"`
	Type             string  `json:"type"`
	SessionID        string  `json:"session_id"`
	AudienceMemberID *string `json:"audience_member_id"`
	URL              string  `json:"url"`
	PageHostname     string  `json:"page_hostname"`
	PagePath         string  `json:"page_path"`
	UserAgent        string  `json:"user_agent"`
	IPAddress        string  `json:"ip_address"`
	EventSequence    int64   `json:"event_sequence"`
	CreatedAt        string  `json:"created_at"`
}

// TimeFormat is ISO 8601 with a numeric offset, as Laravel's toIso8601String (never "Z").
const TimeFormat = "2006-01-02T15:04:05-07:00"

// Queue returns the event's public shape. It is deterministic: the same row always gives the
// same JSON, so a re-push by the worker is byte-identical to the original append.
func (e *TrackedEvent) Queue() QueueEvent {
	return QueueEvent{
		ID: e.ID, Type: e.Type, SessionID: e.SessionID, AudienceMemberID: e.AudienceMemberID,
		URL: e.URL, PageHostname: e.PageHostname, PagePath: e.PagePath, UserAgent: e.UserAgent,
		IPAddress: e.IPAddress, EventSequence: e.EventSequence,
		CreatedAt: e.CreatedAt.UTC().Format(TimeFormat),
	}
}

// MarshalQueue is the exact bytes stored in the queue for e: what encoding/json writes for
// e.Queue() with HTML escaping off (URLs keep their & and < as sent), without the newline.
// It is written by hand because ingestion calls it for every event and the reflective encoder
// cost about three times as much; FuzzMarshalQueue holds it to encoding/json byte for byte.
func (e *TrackedEvent) MarshalQueue() []byte {
	b := make([]byte, 0, 320+len(e.Type)+len(e.SessionID)+len(e.URL)+len(e.PageHostname)+
		len(e.PagePath)+len(e.UserAgent)+len(e.IPAddress))
	b = appendJSONString(append(b, `{"id":`...), e.ID)
	b = appendJSONString(append(b, `,"type":`...), e.Type)
	b = appendJSONString(append(b, `,"session_id":`...), e.SessionID)
	b = append(b, `,"audience_member_id":`...)
	if e.AudienceMemberID == nil {
		b = append(b, "null"...)
	} else {
		b = appendJSONString(b, *e.AudienceMemberID)
	}
	b = appendJSONString(append(b, `,"url":`...), e.URL)
	b = appendJSONString(append(b, `,"page_hostname":`...), e.PageHostname)
	b = appendJSONString(append(b, `,"page_path":`...), e.PagePath)
	b = appendJSONString(append(b, `,"user_agent":`...), e.UserAgent)
	b = appendJSONString(append(b, `,"ip_address":`...), e.IPAddress)
	b = strconv.AppendInt(append(b, `,"event_sequence":`...), e.EventSequence, 10)
	b = appendTime(append(b, `,"created_at":"`...), e.CreatedAt.UTC())
	return append(b, `"}`...)
}

// appendTime appends t, in UTC, as TimeFormat does: 2006-01-02T15:04:05+00:00.
func appendTime(b []byte, t time.Time) []byte {
	year, month, day := t.Date()
	if year < 0 || year > 9999 {
		return t.AppendFormat(b, TimeFormat) // digits and -+:T, which need no escape
	}
	hour, minute, sec := t.Clock()
	b = append(b, byte('0'+year/1000), byte('0'+year/100%10), byte('0'+year/10%10), byte('0'+year%10))
	b = append2(append(b, '-'), int(month))
	b = append2(append(b, '-'), day)
	b = append2(append(b, 'T'), hour)
	b = append2(append(b, ':'), minute)
	b = append2(append(b, ':'), sec)
	return append(b, "+00:00"...)
}

// append2 appends n, from 0 to 99, as two digits.
func append2(b []byte, n int) []byte { return append(b, byte('0'+n/10), byte('0'+n%10)) }

// plainJSON holds the bytes a JSON string takes as they are: printable ASCII but " and \.
var plainJSON = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// appendJSONString appends s as encoding/json writes a string with HTML escaping off: ", \ and
// control characters escaped (\b \f \n \r \t by name), invalid UTF-8 as \ufffd, and U+2028 and
// U+2029 escaped.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if plainJSON[c] {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(append(b, s[start:i]...), `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(append(b, s[start:i]...), '\\', 'u', '2', '0', '2', hex[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	return append(append(b, s[start:]...), '"')
}

// QueueFront is the durable record of a tenant's queue front: how many events were ever
// trimmed from it (Front, the queue's front offset) and the id of the last one (TrimmedThrough), written within a
// second of each trim, so that a queue Redis lost can be rebuilt from the stored events.
type QueueFront struct {
	TenantID       uint64 `gorm:"primaryKey;autoIncrement:false"`
	Front          int64  `gorm:"not null"`
	TrimmedThrough string `gorm:"size:36;not null"`
	UpdatedAt      time.Time
}
