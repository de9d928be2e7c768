package cri

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/go-logr/logr"
)

func TestCRIClientErrorsAreDebugRecords(t *testing.T) {
	var buf bytes.Buffer
	base := slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})
	log := logr.FromSlogHandler(demoted{base}).WithValues("k", "v")
	log.Error(nil, "GetContainerEvents failed")
	log.Info("connected")
	out := buf.String()
	if !strings.Contains(out, `level=DEBUG msg="GetContainerEvents failed"`) || !strings.Contains(out, `level=INFO msg=connected k=v`) {
		t.Errorf("records:\n%s", out)
	}
	info := slog.NewTextHandler(&buf, nil)
	buf.Reset()
	logr.FromSlogHandler(demoted{info}).Error(nil, "routine miss")
	if buf.Len() != 0 {
		t.Errorf("an info-level logger printed a cri-client error: %s", buf.String())
	}
}
