package podruntime

import (
	"reflect"
	"testing"

	"github.com/nodelet/nodelet/internal/pure/plan"
)

// A start failure of this sync is newer than the plan's waiting state of
// the same container, and both reach the status.
func TestWaitingOf(t *testing.T) {
	planned := map[string]plan.Waiting{
		"app":     {Reason: plan.ReasonCrashLoopBackOff, Message: "back-off 10s"},
		"sidecar": {Reason: plan.ReasonImagePullBackOff, Message: "back-off pulling"},
	}
	failures := []startFailure{
		{container: "app", waiting: plan.Waiting{Reason: "CreateContainerConfigError", Message: "no key"}},
		{container: "init", waiting: plan.Waiting{Reason: "RunContainerError", Message: "exec failed"}},
	}
	got := waitingOf(planned, failures)
	want := map[string]plan.Waiting{
		"app":     {Reason: "CreateContainerConfigError", Message: "no key"},
		"sidecar": {Reason: plan.ReasonImagePullBackOff, Message: "back-off pulling"},
		"init":    {Reason: "RunContainerError", Message: "exec failed"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("waitingOf = %v, want %v", got, want)
	}
	if planned["app"].Reason != plan.ReasonCrashLoopBackOff {
		t.Error("waitingOf changed the plan's map")
	}
}
