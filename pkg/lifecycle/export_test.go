package lifecycle

// MarkContended records a lost claim on queue q now, as a FETCH that lost
// one does.
func (s *Service) MarkContended(q string) { s.contention.Store(q, s.now().UnixNano()) }
