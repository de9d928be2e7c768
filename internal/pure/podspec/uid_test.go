package podspec

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

func TestCheckUIDPathElement(t *testing.T) {
	for _, uid := range []types.UID{"", ".", "..", "../x", "a/b", `a\b`, "a\x00b"} {
		if CheckUIDPathElement(uid) == nil {
			t.Errorf("%q accepted", uid)
		}
	}
	for _, uid := range []types.UID{"0f4a6c2e-9b1d-4c3e-8f7a-1234567890ab", "static-3b1c2d", "..x", "x.."} {
		if err := CheckUIDPathElement(uid); err != nil {
			t.Errorf("%q: %v", uid, err)
		}
	}
}
