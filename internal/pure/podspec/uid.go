package podspec

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// CheckUIDPathElement refuses a pod UID that cannot safely name one path
// element (a directory under <root-dir>/pods, a cgroup, a state file):
// empty, "." or "..", or holding a slash, a backslash or a NUL. The API
// server gives UUIDs; a static pod's UID is a hash; anything else is
// hostile input.
func CheckUIDPathElement(uid types.UID) error {
	if s := string(uid); s == "" || s == "." || s == ".." || strings.ContainsAny(s, "/\\\x00") {
		return fmt.Errorf("pod UID %q cannot name a directory", s)
	}
	return nil
}
