package lifecycle

import (
	"slices"
	"testing"

	"github.com/ojs-aws/ojs-serverless/pkg/awslimit"
)

func TestTxChunksKeepEachTransactionUnderItsLimits(t *testing.T) {
	t.Parallel()
	fill := func(n, size int) []int {
		s := make([]int, n)
		for i := range s {
			s[i] = size
		}
		return s
	}
	for _, tc := range []struct {
		name  string
		sizes []int
		want  []int
	}{
		{"small jobs: by count", fill(250, 1000), []int{0, 100, 200, 250}},
		{"large jobs: by bytes", fill(120, 100_000), []int{0, 40, 80, 120}},
		{"exactly the byte limit", fill(2, awslimit.DynamoTxBytes/2), []int{0, 2}},
		{"a job alone over the limit still gets a chunk", []int{10, awslimit.DynamoTxBytes + 1, 10}, []int{0, 1, 2, 3}},
	} {
		if got := txChunks(tc.sizes); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestRotateFrom(t *testing.T) {
	for r, want := range []string{"abcde", "bcdea", "cdeab", "deabc", "eabcd"} {
		s := []byte("abcde")
		rotateFrom(s, r)
		if string(s) != want {
			t.Errorf("rotateFrom(abcde, %d) = %s, want %s", r, s, want)
		}
	}
}
