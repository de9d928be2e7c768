package server

import "testing"

type nodeEvents []string

func (e *nodeEvents) NodeEvent(node, eventType, reason, _ string) {
	*e = append(*e, node+" "+eventType+" "+reason)
}

// The warning is recorded only for a kubelet API that is served and open
// to the cluster.
func TestWarnClusterAuthorization(t *testing.T) {
	open := Settings{Addr: ":10250", Auth: Auth{AuthorizationMode: AuthorizationAlwaysAllow}}
	for _, tt := range []struct {
		name string
		s    Settings
		want int
	}{
		{"open", open, 1},
		{"not served", Settings{Auth: open.Auth}, 0},
		{"webhook", Settings{Addr: ":10250", Auth: Auth{AuthorizationMode: AuthorizationWebhook}}, 0},
	} {
		var got nodeEvents
		WarnClusterAuthorization(&got, "n", tt.s)
		if len(got) != tt.want {
			t.Errorf("%s: events %q, want %d", tt.name, got, tt.want)
		}
	}
}
