// Package queue owns the queues and the workers: the persistence of the
// queue registry items (a queue's name, pause state, redelivery mark and
// FETCH rate limit, pk QUEUES[#n], sk Q#<name>), the rate limiter items
// (sk RL#<name>, beside the registry item) and the worker items (pk
// W#<id>, sk WORKER: heartbeats, directives, listing, deletion) in Store,
// and the queue operations in Service: job admission (push mode, queue
// registration, rate limits), pause and resume, the queue listing and
// stats. It builds on the table kernel of pkg/store (its client, the
// registry's shards); the job items, and the counts of a queue's jobs,
// stay in pkg/store.
package queue
