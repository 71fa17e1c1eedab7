package eventqueue

import "fmt"

// Every key and channel of the event queue, in one place. Each carries its tenant's hash tag
// ({tenant:ID}), so that on a cluster all of a tenant's keys live on one node and its scripts
// may touch them together.
// keyPrefix is what every key and channel of a tenant starts with; tenantOf reads it back.
const keyPrefix = "eventqueue:{tenant:"

// tenantKey is the key (or channel) name of tenantID.
func tenantKey(tenantID uint64, name string) string {
	return fmt.Sprintf("%s%d}:%s", keyPrefix, tenantID, name)
}

// Key is the list of tenantID. The braces are a Redis Cluster hash tag: everything of one
// tenant lives in one slot.
func Key(tenantID uint64) string { return tenantKey(tenantID, "events") }

// SizeKey holds the size in bytes of the largest event appended to tenantID's queue since it
// was last empty (an upper bound: redaction only shrinks events), or nothing when unknown.
func SizeKey(tenantID uint64) string { return tenantKey(tenantID, "maxsize") }

// OffsetKey holds tenantID's front offset: how many events were ever trimmed from its queue.
func OffsetKey(tenantID uint64) string { return tenantKey(tenantID, "offset") }

// DeadKey is the list of tenantID's dead letters, oldest first.
func DeadKey(tenantID uint64) string { return tenantKey(tenantID, "dead") }

// DeadAtKey is the list of the times (Unix ms) tenantID's dead letters went dead, in DeadKey's
// order.
func DeadAtKey(tenantID uint64) string { return tenantKey(tenantID, "dead:at") }

// LeaseStateKey is the hash of tenantID's leased events (see the package's lease notes).
func LeaseStateKey(tenantID uint64) string { return tenantKey(tenantID, "lease:state") }

// LeaseExpiryKey is the sorted set of tenantID's leased events by expiry.
func LeaseExpiryKey(tenantID uint64) string { return tenantKey(tenantID, "lease:expiry") }

// LeaseNextKey is tenantID's lowest offset never leased.
func LeaseNextKey(tenantID uint64) string { return tenantKey(tenantID, "lease:next") }

// LeaseEpochKey is the random part of tenantID's lease ids, replaced by a rebuild.
func LeaseEpochKey(tenantID uint64) string { return tenantKey(tenantID, "lease:epoch") }

// LeaseWaitKey exists while a lease call waits for events: appends then wake it even when the
// queue is not empty.
func LeaseWaitKey(tenantID uint64) string { return tenantKey(tenantID, "lease:waiting") }

// LeaseRangesKey is the hash of tenantID's lease ranges: first offset → "end:acked:nonce"
// (see the package's lease notes).
func LeaseRangesKey(tenantID uint64) string { return tenantKey(tenantID, "lease:ranges") }

// LeaseRangeStartKey is the sorted set of the first offsets of tenantID's lease ranges, by
// offset.
func LeaseRangeStartKey(tenantID uint64) string { return tenantKey(tenantID, "lease:range:start") }

// LeaseRangeExpiryKey is the sorted set of the first offsets of tenantID's lease ranges, by
// expiry.
func LeaseRangeExpiryKey(tenantID uint64) string { return tenantKey(tenantID, "lease:range:expiry") }

// LeaseRangeHeldKey counts the events tenantID's lease ranges hold (not acknowledged).
func LeaseRangeHeldKey(tenantID uint64) string { return tenantKey(tenantID, "lease:range:held") }

// LeaseBatchesKey is the hash of tenantID's batches that handed out events again: lease call
// nonce → the offsets it leased again, comma-separated (a batch's new events are in its id).
func LeaseBatchesKey(tenantID uint64) string { return tenantKey(tenantID, "lease:batches") }

// LeaseBatchesAtKey is the sorted set of LeaseBatchesKey's nonces by the time (Unix ms) of
// their lease call: they are forgotten after GoneRetention.
func LeaseBatchesAtKey(tenantID uint64) string { return tenantKey(tenantID, "lease:batches:at") }

// AckedKey is the sorted set of tenantID's acknowledged events still in the queue.
func AckedKey(tenantID uint64) string { return tenantKey(tenantID, "lease:acked") }

// GoneKey is the sorted set of tenantID's leased events trimmed or dead, by time.
func GoneKey(tenantID uint64) string { return tenantKey(tenantID, "lease:gone") }

// PendingKey records what became of tenantID's pending batch id in its queue: the number of
// its events appended (the first ones; the others were held), or -1 when it was claimed
// (ClaimPending) before any append, after which no append of it goes in. It lives Retention
// unless the batch is settled first (ForgetPending).
func PendingKey(tenantID uint64, id string) string {
	return tenantKey(tenantID, "pending:"+id)
}

// AppendedKey is the sorted set of ids appended to tenantID's queue, in the queue's slot.
func AppendedKey(tenantID uint64) string {
	return tenantKey(tenantID, "appended")
}

// HeldKey is tenantID's hold mark: while it exists, events of the tenant wait in the database
// (their queue was full), and new ones are held behind them. Its value changes with every hold.
func HeldKey(tenantID uint64) string { return tenantKey(tenantID, "held") }

// RebuildKey is set while tenantID's queue is being rebuilt: every append is held, drains too.
func RebuildKey(tenantID uint64) string {
	return tenantKey(tenantID, "rebuilding")
}

// SpoolKey is the list of tenantID's spooled requests, oldest first.
func SpoolKey(tenantID uint64) string { return tenantKey(tenantID, "spool") }

// drainLockKey is held while one process appends tenantID's held events.
func drainLockKey(tenantID uint64) string { return tenantKey(tenantID, "held:draining") }

// WakeChannel is the shard channel the append script publishes on when it appends to
// tenantID's empty queue. It carries the tenant's hash tag, so on a cluster it lives on the
// node of the tenant's queue and a publish goes to that node's subscribers only.
func WakeChannel(tenantID uint64) string {
	return tenantKey(tenantID, "wake")
}
