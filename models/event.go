package models

import (
	"bytes"
	"encoding/json"
	"time"
)

// TrackedEvent is one event recorded through the client library. Every event is stored;
// Queued marks an event that belongs in its tenant's queue (the flag was active when it was
// accepted), QueuePending one that is not known to be there yet (the worker pushes those).
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
	QueuePending     bool      `gorm:"not null;default:false;index"`
	CreatedAt        time.Time `gorm:"index:tracked_events_tenant_created,priority:2"`
}

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

// MarshalQueue is the exact bytes stored in the queue for e.
func (e *TrackedEvent) MarshalQueue() []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)                      // URLs keep their & and < as sent
	if err := enc.Encode(e.Queue()); err != nil { // cannot happen: only strings and integers
		panic(err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
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
