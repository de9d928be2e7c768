package podspec

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestLegacyLogLink(t *testing.T) {
	got := LegacyLogLink("/var/log/pods", "web", "default", "app", "abc123")
	if got != "/var/log/containers/web_default_app-abc123.log" {
		t.Errorf("got %s", got)
	}
	long := LegacyLogLink("/var/log/pods/", strings.Repeat("p", 253), "ns", "c", "id")
	if base := filepath.Base(long); len(base) != 255 || !strings.HasSuffix(base, ".log") {
		t.Errorf("long name %d bytes: %s", len(base), base)
	}
}
