package nodestatus

import (
	"github.com/nodelet/nodelet/internal/cri"
	"github.com/nodelet/nodelet/internal/events"
	"github.com/nodelet/nodelet/internal/pleg"
	"github.com/nodelet/nodelet/internal/stats"
)

// What the composition root hands over fits the interfaces.
var (
	_ Runtime       = (*cri.Client)(nil)
	_ Machine       = (*stats.HostMachine)(nil)
	_ EventRecorder = (*events.Recorder)(nil)
	_               = Deps{PLEGHealthy: (*pleg.Generic)(nil).Healthy}
)
