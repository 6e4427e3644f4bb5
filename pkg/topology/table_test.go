package topology

import (
	"slices"
	"testing"
)

// The ready and due indexes project no job payloads (every index write
// costs a write unit per KB projected), and the table stays within
// DynamoDB's limit of 100 projected non-key attributes over all indexes.
func TestIndexProjectionsLeavePayloadsOut(t *testing.T) {
	total := 0
	for _, ix := range JobTable.Indexes {
		total += len(ix.Include)
		if ix.Name != IndexReady && ix.Name != IndexDue {
			continue
		}
		if len(ix.Include) == 0 {
			t.Fatalf("index %s projects every attribute", ix.Name)
		}
		for _, payload := range []string{"args", "meta", "result", "errors", "parent_results", "tags", "extra"} {
			if slices.Contains(ix.Include, payload) {
				t.Errorf("index %s projects %s", ix.Name, payload)
			}
		}
		for _, need := range []string{"fb", "state", "queue", "type", "attempt", "retry", "lease_until", "expires_ms"} {
			if !slices.Contains(ix.Include, need) {
				t.Errorf("index %s does not project %s, which its readers use", ix.Name, need)
			}
		}
	}
	if total > 100 {
		t.Fatalf("%d projected attributes over all indexes; DynamoDB allows 100", total)
	}
}
