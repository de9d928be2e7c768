package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/proxy"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// StreamingRuntime serves exec, attach and portForward: it finds the
// container or sandbox of a known pod and asks the runtime for the URL of
// its streaming server, where the upgraded request is proxied.
type StreamingRuntime interface {
	// ContainerID resolves the container named container of the known pod
	// namespace/pod (of that UID when uid is not empty) to its runtime ID.
	// An unknown pod or container is an error wrapping ErrNotFound.
	ContainerID(ctx context.Context, namespace, pod, uid, container string) (string, error)
	// SandboxID resolves the known pod to the ID of its pod sandbox. An
	// unknown pod is an error wrapping ErrNotFound.
	SandboxID(ctx context.Context, namespace, pod, uid string) (string, error)
	// Exec, Attach and PortForward return the runtime's streaming URL.
	Exec(ctx context.Context, req *runtimeapi.ExecRequest) (string, error)
	Attach(ctx context.Context, req *runtimeapi.AttachRequest) (string, error)
	PortForward(ctx context.Context, req *runtimeapi.PortForwardRequest) (string, error)
}

// streamOptions are the query options of exec and attach.
type streamOptions struct {
	Command                    []string
	Stdin, Stdout, Stderr, TTY bool
}

// parseStreamOptions reads the kubelet's exec and attach options: command
// (repeated), stdin, stdout, stderr and tty ("1" or "true"), and the older
// input, output and error names of the three streams. At least one stream
// is needed, and a TTY has no separate stderr.
func parseStreamOptions(q url.Values, needCommand bool) (streamOptions, error) {
	var o streamOptions
	for _, f := range []struct {
		dst   *bool
		names []string
	}{
		{&o.Stdin, []string{"stdin", "input"}},
		{&o.Stdout, []string{"stdout", "output"}},
		{&o.Stderr, []string{"stderr", "error"}},
		{&o.TTY, []string{"tty"}},
	} {
		for _, name := range f.names {
			if !q.Has(name) {
				continue
			}
			b, err := parseStreamBool(q.Get(name))
			if err != nil {
				return o, fmt.Errorf("%s: %w", name, err)
			}
			*f.dst = *f.dst || b
		}
	}
	o.Command = q["command"]
	if needCommand && len(o.Command) == 0 {
		return o, errors.New("no command given: set the command parameter")
	}
	if !needCommand && len(o.Command) > 0 {
		return o, errors.New("attach takes no command")
	}
	if !o.Stdin && !o.Stdout && !o.Stderr {
		return o, errors.New("you must specify at least one of stdin, stdout, stderr")
	}
	if o.TTY && o.Stderr {
		return o, errors.New("tty and stderr cannot both be true")
	}
	return o, nil
}

// parseStreamBool reads a stream flag: "1" or "true" (any of
// strconv.ParseBool's spellings), and "" for false.
func parseStreamBool(v string) (bool, error) {
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("invalid value %q: want 1, true, 0 or false", v)
	}
	return b, nil
}

// parsePorts reads the ports of portForward: port (repeated) and ports
// (comma-separated), each 1-65535. None is allowed: the SPDY client names
// the port of each stream in its headers.
func parsePorts(q url.Values) ([]int32, error) {
	var raw []string
	raw = append(raw, q["port"]...)
	for _, v := range q["ports"] {
		raw = append(raw, strings.Split(v, ",")...)
	}
	ports := make([]int32, 0, len(raw))
	for _, v := range raw {
		p, err := strconv.ParseUint(strings.TrimSpace(v), 10, 16)
		if err != nil || p == 0 {
			return nil, fmt.Errorf("invalid port %q: want 1-65535", v)
		}
		ports = append(ports, int32(p))
	}
	return ports, nil
}

// serveStreaming serves /exec, /attach and /portForward by proxying to
// the runtime's streaming server; /run, and every route when no
// StreamingRuntime is set, answer 501.
func (s *secureServer) serveStreaming(w http.ResponseWriter, r *http.Request) {
	ns, pod, uid, ctr := r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("uid"), r.PathValue("container")
	if err := validateNames(ns, pod, ctr, uid); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	rt := s.deps.Streaming
	kind, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	if rt == nil || kind == "run" {
		s.streamingNotImplemented(w, r)
		return
	}
	ctx := r.Context()
	var (
		target string
		err    error
	)
	switch kind {
	case "exec", "attach":
		var o streamOptions
		o, err = parseStreamOptions(r.URL.Query(), kind == "exec")
		if err != nil {
			http.Error(w, fmt.Sprintf("invalid %s options: %v", kind, err), http.StatusBadRequest)
			return
		}
		var id string
		if id, err = rt.ContainerID(ctx, ns, pod, uid, ctr); err != nil {
			s.streamError(w, r, kind, fmt.Errorf("pod %s/%s container %q: %w", ns, pod, ctr, err))
			return
		}
		if kind == "exec" {
			target, err = rt.Exec(ctx, &runtimeapi.ExecRequest{
				ContainerId: id, Cmd: o.Command, Tty: o.TTY,
				Stdin: o.Stdin, Stdout: o.Stdout, Stderr: o.Stderr,
			})
		} else {
			target, err = rt.Attach(ctx, &runtimeapi.AttachRequest{
				ContainerId: id, Tty: o.TTY,
				Stdin: o.Stdin, Stdout: o.Stdout, Stderr: o.Stderr,
			})
		}
	case "portForward":
		var ports []int32
		if ports, err = parsePorts(r.URL.Query()); err != nil {
			http.Error(w, fmt.Sprintf("invalid portForward options: %v", err), http.StatusBadRequest)
			return
		}
		var id string
		if id, err = rt.SandboxID(ctx, ns, pod, uid); err != nil {
			s.streamError(w, r, kind, fmt.Errorf("pod %s/%s: %w", ns, pod, err))
			return
		}
		target, err = rt.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: id, Port: ports})
	default:
		http.NotFound(w, r)
		return
	}
	if err != nil {
		s.streamError(w, r, kind, err)
		return
	}
	u, err := url.Parse(target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		s.streamError(w, r, kind, fmt.Errorf("the runtime's streaming URL %q is not an http(s) URL", target))
		return
	}
	s.log.Debug("proxying stream", "kind", kind, "namespace", ns, "pod", pod, "container", ctr)
	proxy.NewUpgradeAwareHandler(u, nil, false, true, &streamResponder{log: s.log}).ServeHTTP(w, r)
}

// streamError answers an error before the stream is proxied: 404 for an
// unknown pod or container, 500 otherwise.
func (s *secureServer) streamError(w http.ResponseWriter, r *http.Request, kind string, err error) {
	if isNotFound(err) {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	if r.Context().Err() != nil {
		return
	}
	s.log.Error("prepare stream", "kind", kind, "path", r.URL.Path, "err", err)
	http.Error(w, fmt.Sprintf("%s: %v", kind, err), http.StatusInternalServerError)
}

// streamResponder reports a failure of the proxy itself.
type streamResponder struct {
	log *slog.Logger
}

func (p *streamResponder) Error(w http.ResponseWriter, r *http.Request, err error) {
	code := http.StatusInternalServerError
	var st apierrors.APIStatus
	if errors.As(err, &st) && st.Status().Code != 0 {
		code = int(st.Status().Code)
	}
	if code >= http.StatusInternalServerError {
		p.log.Error("proxy stream", "path", r.URL.Path, "err", err)
	}
	http.Error(w, err.Error(), code)
}
