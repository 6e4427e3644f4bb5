// Package emulator keeps the import path the side-by-side harness
// (../shared/sidebyside/oursstack) builds against; the emulators' control
// is internal/dev/emulator, development tooling no Lambda binary links.
// Nothing in the product imports this package.
package emulator

import (
	"context"

	dev "github.com/ojs-aws/ojs-serverless/internal/dev/emulator"
)

// Options and Emulators are internal/dev/emulator's.
type (
	Options   = dev.Options
	Emulators = dev.Emulators
)

// Start is internal/dev/emulator.Start.
func Start(ctx context.Context, o Options) (*Emulators, error) { return dev.Start(ctx, o) }
