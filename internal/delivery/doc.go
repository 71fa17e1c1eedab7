// Package delivery takes an accepted event from ingestion to its stored row and, for a tenant
// with UseQueueEvents, to its queue, exactly once. internal/tracking is the front end that
// hands rows over (Service.Deliver); internal/eventstore stores them and internal/eventqueue is
// the queue's Redis side.
//
// One name per concept:
//   - Commit (batch.go): concurrent requests' rows are written together by a few committers
//     (group commit), with one pending batch per queued tenant of the batch.
//   - Push (push.go): the committer's pusher appends a written batch to the queues and answers
//     its requests; settling deletes the pending batch, or marks the events the queue held back.
//   - Pending batch, pending mark: the records of events stored but not known to be in their
//     queue (eventstore). An append of a pending batch is deduplicated by the batch: the append
//     script records how many of its events went in (eventqueue.PendingKey). Before anyone else
//     takes a batch over (Requeue, for old batches; a held tenant's drain) it claims it
//     (Held.Claim): that reads the count, or writes -1 so that no append of it goes in
//     afterwards. Whoever then deletes the batch owns its events and marks those not appended,
//     in the same transaction; marked events are pushed one by one, each deduplicated.
//   - Requeue (requeue.go): the worker's pass that pushes marked events and claimed batches.
//   - Held tenant: a tenant whose queue is full (MaxLength) or whose spool is not drained:
//     new events wait behind a hold mark, and DrainHeld appends them in order once there is room.
//   - Spool (spool.go): while the database is down, accepted rows go to Redis instead;
//     DrainSpool stores and queues them once it answers.
package delivery
