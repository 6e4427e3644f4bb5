//go:build ojsdev

package main

// A development build (make build-local, make bench) counts its AWS requests
// when OJS_CALL_STATS_DIR is set and writes CPU profiles when
// OJS_CPUPROFILE_DIR is set; binaries for AWS are built without the tag.
import (
	_ "github.com/ojs-aws/ojs-serverless/internal/dev/callstats/autocount"
	_ "github.com/ojs-aws/ojs-serverless/internal/dev/profile"
)
