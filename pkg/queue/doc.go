// Package queue owns the queues and the workers: the queue registry, rate
// limiter and worker items (Store) and the queue operations (Service): job
// admission, pause and resume, the queue listing and stats.
package queue
