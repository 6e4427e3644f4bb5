package jsoncase

import (
	"encoding/json"
	"reflect"
	"testing"
)

type inner struct {
	Code string `json:"code"`
}

type base struct {
	ID string `json:"id"`
}

type outer struct {
	base
	Type    *string          `json:"type"`
	Args    json.RawMessage  `json:"args"`
	Err     *inner           `json:"error"`
	List    []inner          `json:"list"`
	ByName  map[string]inner `json:"by_name"`
	Raw     map[string]any   `json:"raw"`
	Skipped string           `json:"-"`
	Plain   int
	Opts    map[string]json.RawMessage `json:"opts"`
}

func TestUnmarshalIsCaseSensitive(t *testing.T) {
	var o outer
	err := Unmarshal([]byte(`{"ID":"x","Type":"evil.x","type":"a.b","args":["a&b<c>"],"ERROR":{"code":"c"},
		"list":[{"Code":"no"},{"code":"yes"}],"by_name":{"k":{"CODE":"no"}},"raw":{"Type":1},"plain":3,"Plain":4}`), &o)
	if err != nil {
		t.Fatal(err)
	}
	want := outer{Type: o.Type, Args: json.RawMessage(`["a&b<c>"]`), List: []inner{{}, {Code: "yes"}},
		ByName: map[string]inner{"k": {}}, Raw: map[string]any{"Type": 1.0}, Plain: 4}
	if o.Type == nil || *o.Type != "a.b" || o.ID != "" || o.Err != nil || !reflect.DeepEqual(o, want) {
		t.Fatalf("got %+v", o)
	}
	// Exact names decode as encoding/json does, and so do its errors.
	var a, b outer
	in := []byte(`{"id":"i","type":"t","args":[1, 2],"error":{"code":"c"},"list":[{"code":"x"}]}`)
	if err := Unmarshal(in, &a); err != nil || json.Unmarshal(in, &b) != nil || !reflect.DeepEqual(a, b) {
		t.Fatalf("%+v vs %+v: %v", a, b, err)
	}
	for _, bad := range []string{`{"type":1}`, `[1]`, `{`, `{"list":{}}`, `{"Type":1,"type":2}`} {
		e1, e2 := Unmarshal([]byte(bad), &a), json.Unmarshal([]byte(bad), &b)
		if (e1 == nil) != (e2 == nil) {
			t.Errorf("%s: %v vs %v", bad, e1, e2)
		}
	}
}
