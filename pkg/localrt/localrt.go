// Package localrt keeps the import path the side-by-side harness
// (../shared/sidebyside/oursstack) builds against; the local Lambda
// runtime is internal/dev/localrt, development tooling no Lambda binary
// links. Nothing in the product imports this package.
package localrt

import (
	"context"

	dev "github.com/ojs-aws/ojs-serverless/internal/dev/localrt"
)

// Config and Runtime are internal/dev/localrt's.
type (
	Config  = dev.Config
	Runtime = dev.Runtime
)

// Start is internal/dev/localrt.Start.
func Start(ctx context.Context, cfg Config) (*Runtime, error) { return dev.Start(ctx, cfg) }
