// Command ojs-conformance-runner builds the public OJS conformance runner
// from a copy of the suite, with the overlay of internal/dev/conformance (step
// captures and bare $type/$gte matchers, which some extension tests use and
// the stored runner lacks) unless -patch=false.
//
//	go run ./localstack/cmd/ojs-conformance-runner -dir third_party/ojs-conformance -out .local/ojs-conformance-runner-ext
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ojs-aws/ojs-serverless/internal/dev/conformance"
)

func main() {
	dir := flag.String("dir", "third_party/ojs-conformance", "the conformance suite copy (runner/http, lib, suites)")
	out := flag.String("out", ".local/ojs-conformance-runner-ext", "the runner binary to write")
	patch := flag.Bool("patch", true, "add step captures and bare $type/$gte matchers (internal/dev/conformance)")
	flag.Parse()
	d, err := filepath.Abs(*dir)
	if err == nil {
		var o string
		if o, err = filepath.Abs(*out); err == nil {
			err = conformance.Build(context.Background(), conformance.Options{Dir: d, Out: o, Patch: *patch})
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ojs-conformance-runner:", err)
		os.Exit(1)
	}
}
