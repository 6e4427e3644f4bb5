package opaque

import "testing"

func TestRoundTripAndRefusals(t *testing.T) {
	type state struct {
		Q string `json:"q"`
		N int64  `json:"n"`
	}
	in := state{Q: "billing", N: 42}
	var out state
	if s := Encode(in); !Decode(s, &out) || out != in {
		t.Fatalf("%q decoded as %+v", s, out)
	}
	for _, bad := range []string{"!!", "bm90IGpzb24", string(make([]byte, MaxLen+1))} {
		if Decode(bad, &out) {
			t.Errorf("%q accepted", bad)
		}
	}
}
