package eventstore

import (
	"context"
	"time"
)

// CreatedAt is Tx.createdAt on the pool.
func (s *Store) CreatedAt(tenant uint64, id string) (time.Time, bool) {
	return s.Pool(context.Background()).createdAt(tenant, id)
}

// SQLiteInsertChunk is sqliteInsertChunk.
const SQLiteInsertChunk = sqliteInsertChunk

// PendingBatchInsert is pendingBatchInsert.
var PendingBatchInsert = pendingBatchInsert

// PruneDelete is the statement of one prune step on s's database.
func (s *Store) PruneDelete() string { return s.d.prune().delete }
