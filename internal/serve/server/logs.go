package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/nodelet/nodelet/internal/base/logs"
)

// ErrNotFound is what a LogStreamer wraps when the pod or container does
// not exist (fs.ErrNotExist and a NotFound API error are understood too).
var ErrNotFound = errors.New("not found")

// ErrTooManyRequests is what a LogStreamer wraps when it serves as many
// followed logs as it may at once; the client gets 429 and may retry.
var ErrTooManyRequests = errors.New("too many requests")

// LogStreamer writes a container's log to w. It resolves the pod by
// namespace and name (validated DNS names, never paths) and returns when
// the log is written or, with Follow, when ctx ends or the container
// stops.
type LogStreamer interface {
	ContainerLogs(ctx context.Context, namespace, pod, container string, opts logs.Options, w io.Writer) error
}

// containerLogsRequest is what a /containerLogs request asks for.
type containerLogsRequest struct {
	namespace, pod, container string
	options                   logs.Options
}

// parseContainerLogsRequest reads a request routed by containerLogsPattern:
// the mux has split the path on "/" and unescaped each segment, which must
// be a DNS name (never a path: no "/", "..", NUL or empty); the query holds
// the options.
func parseContainerLogsRequest(r *http.Request) (containerLogsRequest, error) {
	req := containerLogsRequest{namespace: r.PathValue("namespace"), pod: r.PathValue("pod"), container: r.PathValue("container")}
	if req.container == "" {
		return containerLogsRequest{}, errors.New("container name is empty")
	}
	if err := validateNames(req.namespace, req.pod, req.container, ""); err != nil {
		return containerLogsRequest{}, err
	}
	opts, err := parseLogOptions(r.URL.Query())
	if err != nil {
		return containerLogsRequest{}, fmt.Errorf("invalid log options: %w", err)
	}
	req.options = opts
	return req, nil
}

// parseLogOptions decodes the query of /containerLogs as the kubelet
// decodes v1.PodLogOptions, and validates it.
func parseLogOptions(q url.Values) (logs.Options, error) {
	// "tail" is the older name of tailLines; "all" means no limit.
	if tail := q.Get("tail"); tail != "" {
		q = cloneValues(q)
		if tail == "all" {
			q.Del("tailLines")
		} else {
			q.Set("tailLines", tail)
		}
	}
	var o logs.Options
	o.Follow = queryBool(q, "follow")
	o.Previous = queryBool(q, "previous")
	o.Timestamps = queryBool(q, "timestamps")
	var err error
	if o.TailLines, err = queryInt64(q, "tailLines"); err != nil {
		return logs.Options{}, err
	}
	if o.LimitBytes, err = queryInt64(q, "limitBytes"); err != nil {
		return logs.Options{}, err
	}
	if o.SinceSeconds, err = queryInt64(q, "sinceSeconds"); err != nil {
		return logs.Options{}, err
	}
	if s := q.Get("sinceTime"); s != "" {
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			return logs.Options{}, fmt.Errorf("sinceTime: %w", err)
		}
		o.SinceTime = &t
	}
	if s := q.Get("stream"); s != "" && s != "All" {
		return logs.Options{}, fmt.Errorf("stream %q: only All is supported", s)
	}
	switch {
	case o.TailLines != nil && *o.TailLines < 0:
		return logs.Options{}, errors.New("tailLines must be greater than or equal to 0")
	case o.LimitBytes != nil && *o.LimitBytes < 1:
		return logs.Options{}, errors.New("limitBytes must be greater than 0")
	case o.SinceSeconds != nil && *o.SinceSeconds < 1:
		return logs.Options{}, errors.New("sinceSeconds must be greater than 0")
	case o.SinceSeconds != nil && o.SinceTime != nil:
		return logs.Options{}, errors.New("at most one of sinceTime or sinceSeconds may be specified")
	}
	return o, nil
}

// queryBool reads a boolean as the API's parameter codec: absent is
// false, "false" and "0" are false, anything else (even empty) is true.
func queryBool(q url.Values, name string) bool {
	v, ok := q[name]
	if !ok || len(v) == 0 {
		return false
	}
	return v[0] != "0" && !strings.EqualFold(v[0], "false")
}

func queryInt64(q url.Values, name string) (*int64, error) {
	s := q.Get(name)
	if s == "" {
		return nil, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return &n, nil
}

func cloneValues(q url.Values) url.Values {
	c := make(url.Values, len(q))
	for k, v := range q {
		c[k] = v
	}
	return c
}

func isNotFound(err error) bool {
	return errors.Is(err, ErrNotFound) || errors.Is(err, fs.ErrNotExist) || apierrors.IsNotFound(err)
}

// logWriter writes a log to the response: headers go out with the first
// byte, so an error before it can still become a status code; with follow
// each write is flushed to the client as it arrives. It may be written
// from several goroutines (stdout and stderr).
type logWriter struct {
	mu      sync.Mutex
	w       http.ResponseWriter
	rc      *http.ResponseController
	follow  bool
	log     *slog.Logger
	written bool
	flushOK bool
}

func newLogWriter(w http.ResponseWriter, follow bool, log *slog.Logger) *logWriter {
	return &logWriter{w: w, rc: http.NewResponseController(w), follow: follow, log: log, flushOK: true}
}

// started reports whether the response has begun.
func (l *logWriter) started() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.written
}

func (l *logWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.written {
		l.written = true
		h := l.w.Header()
		h.Set("Content-Type", "text/plain; charset=utf-8")
		h.Set("X-Content-Type-Options", "nosniff")
		l.w.WriteHeader(http.StatusOK)
	}
	n, err := l.w.Write(p)
	if err != nil {
		return n, err
	}
	if l.follow && l.flushOK {
		if err := l.rc.Flush(); err != nil {
			// Not flushable: the log still arrives, only later.
			l.flushOK = false
			l.log.Debug("log stream cannot be flushed", "err", err)
		}
	}
	return n, nil
}
