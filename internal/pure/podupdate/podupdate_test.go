package podupdate

import "testing"

func TestReasonString(t *testing.T) {
	for r, want := range map[Reason]string{Add: "ADD", Update: "UPDATE", Remove: "REMOVE", Reconcile: "RECONCILE",
		Delete: "DELETE", Resync: "RESYNC", Event: "EVENT", Kill: "KILL", 0: "Reason(0)"} {
		if r.String() != want {
			t.Errorf("%d: %s, want %s", int(r), r, want)
		}
	}
}

func TestTerminates(t *testing.T) {
	for r := Add; r <= Kill; r++ {
		want := r == Remove || r == Delete || r == Kill
		if r.Terminates() != want {
			t.Errorf("%s.Terminates() = %v", r, !want)
		}
	}
}
