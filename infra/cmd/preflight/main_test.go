package main

import (
	"strings"
	"testing"

	"github.com/ojs-aws/ojs-serverless/pkg/topology"
)

func TestCheckConcurrency(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                          string
		limit, unreserved, held, want int
		err                           string // "" fits
	}{
		{name: "new account, limit 10", limit: 10, unreserved: 10, want: 10, err: "leave 0 unreserved"},
		{name: "default limit, first deploy of prod", limit: 1000, unreserved: 1000, want: 50},
		{name: "exactly the minimum left", limit: 1000, unreserved: 150, want: 50},
		{name: "one short", limit: 1000, unreserved: 149, want: 50, err: "at least 1001"},
		{name: "update: the stack holds its reservation", limit: 200, unreserved: 100, held: 50, want: 50},
		{name: "update raising it", limit: 200, unreserved: 100, held: 10, want: 50, err: "leave 60 unreserved"},
	} {
		err := checkConcurrency(tc.limit, tc.unreserved, tc.held, tc.want)
		if (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.err)
		}
	}
}

// TestReserved: the sum comes from the topology the construct reads.
func TestReserved(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"dev", "staging", "prod"} {
		e, err := topology.ForEnv(name)
		if err != nil {
			t.Fatal(err)
		}
		want := 0
		for _, f := range e.Functions {
			want += f.ReservedConcurrency
		}
		if got, which := reserved(e); got != want || want > 0 && !strings.Contains(which, topology.FunctionStream) {
			t.Errorf("%s: reserved %d (%s), want %d", name, got, which, want)
		}
	}
}

func TestCDKOptions(t *testing.T) {
	t.Parallel()
	p, r := cdkOptions(strings.Fields("--profile prod -c account=111122223333 -c region=eu-west-1 --require-approval never"))
	if p != "prod" || r != "eu-west-1" {
		t.Errorf("profile %q region %q", p, r)
	}
	if p, r = cdkOptions([]string{"--profile=ci", "--context=region=us-east-2"}); p != "ci" || r != "us-east-2" {
		t.Errorf("profile %q region %q", p, r)
	}
}
