package job

import (
	"encoding/json"
	"testing"
)

// Attribute names are case-sensitive, as in the spec's JSON Schema: a
// key that differs from a defined attribute only in case is an unknown
// attribute, preserved, never read as the defined one.
func TestAttributeNamesAreCaseSensitive(t *testing.T) {
	e, err := ParseEnqueue([]byte(`{"type":"report.daily","Type":"admin.purge","args":[1],"ARGS":[2],"options":{"queue":"reports","Queue":"admin"}}`), fuzzNow)
	if err != nil {
		t.Fatal(err)
	}
	j := e.Job
	if j.Type != "report.daily" || string(j.Args) != "[1]" || j.Queue != "reports" {
		t.Fatalf("type %q, args %s, queue %q", j.Type, j.Args, j.Queue)
	}
	if string(j.Extra["Type"]) != `"admin.purge"` || string(j.Extra["ARGS"]) != "[2]" {
		t.Fatalf("unknown attributes not preserved: %v", j.Extra)
	}
	if _, err := ParseEnqueue([]byte(`{"TYPE":"report.daily","args":[]}`), fuzzNow); err == nil {
		t.Fatal("TYPE was read as type")
	}
	// Values are kept as sent (compacted), not re-escaped.
	e, err = ParseEnqueue([]byte(`{"type":"a.b","args":["a&b<c>"],"Args":0}`), fuzzNow)
	if err != nil || string(e.Job.Args) != `["a&b<c>"]` {
		t.Fatalf("args %s, %v", e.Job.Args, err)
	}
	var m map[string]any
	if b, _ := json.Marshal(e.Job); json.Unmarshal(b, &m) != nil || m["Args"] != 0.0 {
		t.Fatalf("rendered %v", m)
	}
}
