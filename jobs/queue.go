package jobs

// TaskQueue is the asynq queue that every task is enqueued on and that the worker serves. It
// is asynq's own default queue, the one Enqueue uses for a task that names none, so that tasks
// queued by an older process are still served; whoever looks a task up (the CLI's webhook
// send, the tests) names this constant rather than the string.
const TaskQueue = "default"
