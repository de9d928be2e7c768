package nodestatus

import (
	"github.com/nodelet/nodelet/internal/base/events"
	"github.com/nodelet/nodelet/internal/pipeline/cri"
	"github.com/nodelet/nodelet/internal/pipeline/pleg"
	"github.com/nodelet/nodelet/internal/serve/stats"
)

// What the composition root hands over fits the interfaces.
var (
	_ Runtime       = (*cri.Client)(nil)
	_ Machine       = (*stats.HostMachine)(nil)
	_ EventRecorder = (*events.Recorder)(nil)
	_               = Deps{PLEGHealthy: (*pleg.Generic)(nil).Healthy}
)
