package server

import (
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"syscall"
)

// systemLogsHandler serves the node's log directory at /logs/ as the
// kubelet's enableSystemLogHandler does (http.FileServer over /var/log):
// a file's content, with Range and conditional requests; a directory's
// listing (or its index.html); a redirect from a directory path without
// its trailing slash; 404 for what does not exist. The NodeLogQuery
// parameters (query, sinceTime, tailLines, ...: the kubelet's
// enableSystemLogQuery, off by default) are not implemented and are
// ignored, as the kubelet ignores them with enableSystemLogQuery off.
//
// Unlike http.Dir, nothing outside dir is ever served: paths are opened
// through an os.Root, so neither ".." nor a symbolic link leads out of it
// (such a path is 404). Only regular files and directories are opened,
// without blocking (a FIFO would hang the request; a device could read
// forever): anything else is 403. Files are sent as text/plain with
// nosniff, so that a log line that looks like HTML is never run as a page.
//
// dir "" is the endpoint switched off: 405 "logs endpoint is disabled.",
// as the kubelet answers then.
func systemLogsHandler(dir string, log *slog.Logger) http.Handler {
	if dir == "" {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "logs endpoint is disabled.", http.StatusMethodNotAllowed)
		})
	}
	return http.StripPrefix(logsPath, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		root, err := os.OpenRoot(dir)
		if err != nil {
			log.Error("system logs", "dir", dir, "err", err)
			http.Error(w, "system logs are not available", http.StatusNotFound)
			return
		}
		defer root.Close()
		h := w.Header()
		// A directory listing sets text/html over this.
		h.Set("Content-Type", "text/plain; charset=utf-8")
		h.Set("X-Content-Type-Options", "nosniff")
		http.FileServerFS(logFS{root}).ServeHTTP(w, r)
	}))
}

// logFS is an os.Root as an fs.FS that opens only regular files and
// directories, and says "does not exist" for a path that leaves the root.
type logFS struct{ root *os.Root }

func (l logFS) Open(name string) (fs.File, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	// O_NONBLOCK: opening a FIFO for reading would otherwise wait for a
	// writer. It changes nothing for regular files and directories.
	f, err := l.root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
			return nil, err
		}
		// Escaping the root, a symlink loop, a path through a file.
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() && !st.IsDir() {
		f.Close()
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrPermission}
	}
	return f, nil
}
