package app

import (
	"fmt"
	"testing"

	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

// OJS_RESULT_TTL and OJS_QUEUE_RESULT_TTL take -1, 0 or seconds up to
// job.MaxResultTTL; anything else stops the function at start.
func TestResultTTLEnv(t *testing.T) {
	for _, c := range []struct{ def, queues, want string }{
		{"", "", "<nil> map[]"},
		{"-1", `{"reports":0,"thumbs":3600}`, "-1 map[reports:0 thumbs:3600]"},
		{"-2", "", "error"}, {"7d", "", "error"}, {"315360001", "", "error"},
		{"", `{"q":-5}`, "error"}, {"", `[1]`, "error"},
	} {
		t.Setenv(topology.EnvResultTTL, c.def)
		t.Setenv(topology.EnvQueueResultTTL, c.queues)
		def, perQueue, err := resultTTLs()
		got := "error"
		if err == nil {
			got = fmt.Sprint(perQueue)
			if def != nil {
				got = fmt.Sprint(*def, " ", got)
			} else {
				got = "<nil> " + got
			}
		}
		if got != c.want {
			t.Errorf("%q %q: %s; want %s", c.def, c.queues, got, c.want)
		}
	}
}
