package notify

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

func ready(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// Kicks before the receiver looks are one wake-up; none is lost.
func TestKickCoalesces(t *testing.T) {
	k := NewKick()
	if ready(k.C()) {
		t.Fatal("ready before any kick")
	}
	k.Kick()
	k.Kick() // does not block
	if !ready(k.C()) {
		t.Fatal("not ready after kicks")
	}
	if ready(k.C()) {
		t.Error("two kicks woke the receiver twice")
	}
}

func TestNilKick(t *testing.T) {
	var k *Kick
	k.Kick()
	if k.C() != nil {
		t.Error("a nil Kick has a channel")
	}
}

// UIDs added before the receiver looks are all taken at once, each once.
func TestUIDs(t *testing.T) {
	u := NewUIDs()
	u.Add("a")
	u.Add("b")
	u.Add("a")
	if !ready(u.C()) {
		t.Fatal("not ready after Add")
	}
	got := u.Take()
	slices.Sort(got)
	if !slices.Equal(got, []types.UID{"a", "b"}) {
		t.Errorf("Take = %v, want [a b]", got)
	}
	if got := u.Take(); len(got) != 0 || ready(u.C()) {
		t.Errorf("after Take: %v, ready %v; want nothing", got, ready(u.C()))
	}
	var none *UIDs
	none.Add("a")
	if none.C() != nil || none.Take() != nil {
		t.Error("a nil UIDs holds something")
	}
}
