// Package held owns the database side of the events that are stored but not known to be in
// their queue yet: the pending batches (models.PendingBatch) and the pending marks on events
// (tracked_events.queue_pending). It writes and reads both for ingestion (internal/tracking,
// which appends and settles them), for the queue's statistics and for a queue's rebuild
// (internal/consume); the Redis side of each step is one operation of internal/eventqueue.
//
// An ingested event is not marked pending row by row: the committer writes one pending batch
// per tenant of a batch, in the same transaction as the rows, and deletes it once the events
// are in their queue. Clearing a mark per event was an UPDATE of every row (a second heap
// tuple and index entries on Postgres, a fifth of the SQLite writer's time at fifty events a
// request); deleting a batch is one row.
//
// The append of a pending batch's events is deduplicated by the batch, not by each event: the
// append script records how many of the batch's events it put in the queue
// (eventqueue.PendingKey), and appends nothing of a batch that has a record. Before anyone
// else (the re-pusher, for old batches; a held tenant's drain) takes a batch over, it claims
// it (Claim): that reads the count, or writes -1 (none went in) so that no append of it goes
// in afterwards. Whoever then deletes the batch owns its events: the pusher marks those it
// could not append (held), a claimer those after the count, in the same transaction as the
// delete; from then on they are pushed as any marked event is, deduplicated one by one. The
// pusher deletes the batch's record once it deleted the batch; a claimer's record lapses after
// eventqueue.Retention.
package held
