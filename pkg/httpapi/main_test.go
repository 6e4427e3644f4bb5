package httpapi_test

import (
	"testing"

	"github.com/ojs-aws/ojs-serverless/internal/dev/testenv"
)

// TestMain gives the tests that need them the emulators (DynamoDB Local);
// the harness tests run over refusingDB and do not use them.
func TestMain(m *testing.M) { testenv.Main(m) }
