package prober

import "github.com/nodelet/nodelet/internal/podruntime"

// The manager is what the runtime manager consumes.
var _ podruntime.ProbeResults = (*Manager)(nil)
