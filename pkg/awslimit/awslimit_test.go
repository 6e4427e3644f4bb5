package awslimit_test

import (
	"encoding/json"
	"math/rand/v2"
	"testing"

	"github.com/ojs-aws/ojs-serverless/pkg/awslimit"
)

func TestJSONStringLenMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	cases := []string{"", "plain", `"quoted" \ back`, "<tag>&amp;", "\x00\x01\b\f\n\r\t\x1f", "é ü 漢字 🎉", "\u2028\u2029", "bad \xff\xfe utf8", string([]byte{0xe2, 0x80})}
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "\"", "\\", "<", "\x00", "\n", "é", "漢", "🎉", "\u2028", "\xff", "&", " "}
	for i := 0; i < 500; i++ {
		s := ""
		for n := rng.IntN(40); n > 0; n-- {
			s += alphabet[rng.IntN(len(alphabet))]
		}
		cases = append(cases, s)
	}
	for _, s := range cases {
		want, _ := json.Marshal(s)
		if got := awslimit.JSONStringLen([]byte(s)); got != len(want) {
			t.Errorf("JSONStringLen(%q) = %d, encoding/json gives %d (%s)", s, got, len(want), want)
		}
	}
}

func FuzzJSONStringLen(f *testing.F) {
	f.Add([]byte(`{"jobs":[{"args":["<x>"]}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		want, _ := json.Marshal(string(b))
		if got := awslimit.JSONStringLen(b); got != len(want) {
			t.Fatalf("JSONStringLen(%q) = %d, encoding/json gives %d", b, got, len(want))
		}
	})
}
