package containerd

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// DefaultHandler is the runtime handler the managed containerd always
// defines, and runs a sandbox with when the CRI asks for none ("").
const DefaultHandler = "runc"

// runcType is containerd's runtime type of runc's shim, the default of a
// Handler.
const runcType = "io.containerd.runc.v2"

// runtimeType is a containerd shim's runtime type as containerd users
// write it (io.containerd.runc.v2, io.containerd.runsc.v1,
// io.containerd.kata.v2): containerd runs containerd-shim-<name>-<version>.
var runtimeType = regexp.MustCompile(`^io\.containerd\.[a-z0-9][a-z0-9_-]*\.v[0-9]+$`)

// Handler is one more runtime handler the managed containerd defines
// beside runc: a runtime under containerd's CRI plugin
// (plugins.<cri>.containerd.runtimes.<Name>), which RuntimeClasses name
// in their handler field.
type Handler struct {
	// Name is the handler's name, what a RuntimeClass's handler says: a
	// DNS label (RFC 1123), as the API requires of a RuntimeClass's
	// handler, other than runc.
	Name string
	// RuntimeType is containerd's runtime_type, the shim that runs the
	// sandboxes; empty means runc's (io.containerd.runc.v2).
	RuntimeType string
	// BinaryName, with runc's shim only, is the OCI runtime binary the
	// shim runs instead of runc (crun, a wrapper of runc): an absolute
	// path. Empty: runc from the shim's PATH.
	BinaryName string
}

// runtimeType is h's runtime type with the default filled in.
func (h Handler) runtimeType() string {
	if h.RuntimeType == "" {
		return runcType
	}
	return h.RuntimeType
}

// validate reports what is wrong with h, if anything.
func (h Handler) validate() error {
	if errs := validation.IsDNS1123Label(h.Name); len(errs) > 0 {
		return fmt.Errorf("runtime handler %q: %s", h.Name, strings.Join(errs, "; "))
	}
	if h.Name == DefaultHandler {
		return fmt.Errorf("runtime handler %q: the managed containerd always defines it", h.Name)
	}
	if !runtimeType.MatchString(h.runtimeType()) {
		return fmt.Errorf("runtime handler %q: runtime type %q is not a containerd runtime type such as %s", h.Name, h.RuntimeType, runcType)
	}
	if h.BinaryName == "" {
		return nil
	}
	if h.runtimeType() != runcType {
		return fmt.Errorf("runtime handler %q: a binary is an option of runc's shim (%s) only, not of %s", h.Name, runcType, h.RuntimeType)
	}
	if !filepath.IsAbs(h.BinaryName) || strings.ContainsFunc(h.BinaryName, func(r rune) bool { return r < ' ' || r == '"' || r == '\\' || r == 0x7f }) {
		return fmt.Errorf("runtime handler %q: binary %q must be an absolute path without quotes, backslashes or control characters", h.Name, h.BinaryName)
	}
	return nil
}

// validateHandlers reports the first handler that is invalid or defined
// twice.
func validateHandlers(hs []Handler) error {
	seen := make(map[string]bool, len(hs))
	for _, h := range hs {
		if err := h.validate(); err != nil {
			return err
		}
		if seen[h.Name] {
			return fmt.Errorf("runtime handler %q is defined twice", h.Name)
		}
		seen[h.Name] = true
	}
	return nil
}

// ParseHandler parses one --runtime-handler value:
// name=NAME[,type=RUNTIME_TYPE][,binary=PATH], the fields of a containerd
// runtime (its name, runtime_type and options.BinaryName).
func ParseHandler(s string) (Handler, error) {
	var h Handler
	seen := map[string]bool{}
	for _, field := range strings.Split(s, ",") {
		key, value, ok := strings.Cut(field, "=")
		if !ok || value == "" {
			return Handler{}, fmt.Errorf("runtime handler %q: %q is not key=value (name=NAME[,type=RUNTIME_TYPE][,binary=PATH])", s, field)
		}
		if seen[key] {
			return Handler{}, fmt.Errorf("runtime handler %q: %s given twice", s, key)
		}
		seen[key] = true
		switch key {
		case "name":
			h.Name = value
		case "type":
			h.RuntimeType = value
		case "binary":
			h.BinaryName = value
		default:
			return Handler{}, fmt.Errorf("runtime handler %q: unknown field %q (name, type, binary)", s, key)
		}
	}
	if h.Name == "" {
		return Handler{}, fmt.Errorf("runtime handler %q: no name", s)
	}
	return h, h.validate()
}

// handlerData is what the config templates write of one handler.
type handlerData struct {
	Name, RuntimeType, BinaryName string
	Runc                          bool // runc's shim: its options apply
}

func handlersData(hs []Handler) []handlerData {
	out := make([]handlerData, 0, len(hs))
	for _, h := range hs {
		out = append(out, handlerData{Name: h.Name, RuntimeType: h.runtimeType(), BinaryName: h.BinaryName, Runc: h.runtimeType() == runcType})
	}
	return out
}
