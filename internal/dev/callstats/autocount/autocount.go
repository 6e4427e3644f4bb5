// Package autocount makes a development build of a function count its AWS
// requests: imported (for its side effect) by the functions' files built
// with the ojsdev tag, it adds the callstats middleware to every client
// awsclient.Load builds when OJS_CALL_STATS_DIR is set. Binaries built for
// AWS (without the tag) never link it.
package autocount

import (
	"github.com/ojs-aws/ojs-serverless/internal/dev/callstats"
	"github.com/ojs-aws/ojs-serverless/pkg/awsclient"
)

func init() {
	if rec := callstats.FromEnv(); rec != nil {
		awsclient.APIOptions = append(awsclient.APIOptions, rec.AddMiddleware)
	}
}
