package models

import "time"

// Erasure statuses.
const (
	ErasurePending = "pending"
	ErasureDone    = "done"
)

// MemberErasure is a data subject's request to be erased, carried out by the worker: it
// survives any process being killed, and the worker's sweep resumes it. ExternalID is the
// member's former external id, kept until the erasure is done (its events are found by it);
// ExternalHash is its SHA-256, kept so that later events naming it are stored without it.
type MemberErasure struct {
	ID             uint64     `gorm:"primaryKey"`
	TenantID       uint64     `gorm:"not null;index:member_erasures_tenant_member,priority:1"`
	MemberID       uint64     `gorm:"not null;index:member_erasures_tenant_member,priority:2"`
	ExternalID     *string    `gorm:"size:191"`
	ExternalHash   string     `gorm:"size:64;not null;default:''"`
	Status         string     `gorm:"size:16;not null;index"`
	RequestedAt    time.Time  `gorm:"not null"`
	CompletedAt    *time.Time `gorm:"column:completed_at"`
	EventsDeleted  *int64
	EventsRedacted *int64
}
