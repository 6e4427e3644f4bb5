package lifecycle

// MarkContended records a lost claim on queue q now, as a FETCH that lost
// one does.
func (s *Service) MarkContended(q string) { s.contention.Store(q, s.now().UnixNano()) }

// SetMaxBulkBytes sets the bytes of dead letter jobs one bulk call holds
// until the returned func restores it.
func SetMaxBulkBytes(n int) func() {
	old := maxBulkBytes
	maxBulkBytes = n
	return func() { maxBulkBytes = old }
}
