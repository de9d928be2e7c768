package prober

import "github.com/nodelet/nodelet/internal/pure/podsetup"

// The manager is what the probes hook hands the runtime manager.
var _ podsetup.ProbeResults = (*Manager)(nil)
