package securitycontext

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// VerifyRunAsNonRoot refuses container c of pod when its effective
// runAsNonRoot is true and it would run as root, with the kubelet's
// messages:
//   - a runAsUser of 0 in the security context: "container's runAsUser
//     breaks non-root policy";
//   - else the image's user: uid 0, the name "root", or none at all (the
//     image runs as root): "container has runAsNonRoot and image will run
//     as root"; a uid out of [0, 2^31-1]: "... image has an invalid user
//     id"; another name: "container has runAsNonRoot and image has
//     non-numeric user (<name>), cannot verify user is non-root".
//
// imageUID and imageUsername are the CRI ImageStatus's uid and username;
// an image config User such as "1000", "1000:1000" or "nobody:nogroup"
// passed as imageUsername is understood too.
func VerifyRunAsNonRoot(pod *v1.Pod, c *v1.Container, imageUID *int64, imageUsername string) error {
	eff := Effective(pod, c)
	if eff.RunAsNonRoot == nil || !*eff.RunAsNonRoot {
		return nil
	}
	where := fmt.Sprintf("(pod: %q, container: %s)", podDesc(pod), c.Name)
	if eff.RunAsUser != nil {
		if *eff.RunAsUser == 0 {
			return fmt.Errorf("container's runAsUser breaks non-root policy %s", where)
		}
		return nil
	}
	uid, name := imageUser(imageUID, imageUsername)
	switch {
	case uid != nil && *uid == 0, uid == nil && (name == "" || name == "root"):
		return fmt.Errorf("container has runAsNonRoot and image will run as root %s", where)
	case uid != nil && (*uid < 0 || *uid > math.MaxInt32):
		return fmt.Errorf("container has runAsNonRoot and image has an invalid user id (%d). (Must be 1-(%d)) %s", *uid, math.MaxInt32, where)
	case uid != nil:
		return nil
	}
	return fmt.Errorf("container has runAsNonRoot and image has non-numeric user (%s), cannot verify user is non-root %s", name, where)
}

// imageUser is the image's uid, or else its user name, reading a
// "user[:group]" username as the image config's User.
func imageUser(uid *int64, username string) (*int64, string) {
	if uid != nil {
		return uid, ""
	}
	user, _, _ := strings.Cut(strings.TrimSpace(username), ":")
	if n, err := strconv.ParseInt(user, 10, 64); err == nil {
		return &n, ""
	}
	return nil, user
}

// podDesc is the kubelet's format.Pod: "name_namespace(uid)".
func podDesc(pod *v1.Pod) string {
	return fmt.Sprintf("%s_%s(%s)", pod.Name, pod.Namespace, pod.UID)
}
