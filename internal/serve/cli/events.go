package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/nodelet/nodelet/internal/base/events"
)

// PrintEvents prints events as `nodelet events` shows them: one line each,
// oldest first, with the object it is about: namespace/name for a pod,
// node/name for the node itself.
func PrintEvents(w io.Writer, evs []events.Event) error {
	var out strings.Builder
	fmt.Fprintf(&out, "%-8s %-20s %-40s %s\n", "TYPE", "REASON", "OBJECT", "MESSAGE")
	for _, e := range evs {
		object := e.Namespace + "/" + e.Pod
		if e.Node != "" {
			object = "node/" + e.Node
		}
		fmt.Fprintf(&out, "%-8s %-20s %-40s %s\n", e.Type, e.Reason, object, e.Message)
	}
	_, err := io.WriteString(w, out.String())
	return wrapWrite(err)
}
