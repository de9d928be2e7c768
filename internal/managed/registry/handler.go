package registry

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// maxManifestBytes bounds a manifest the handler reads into memory.
const maxManifestBytes = 4 << 20

// handler answers the pull side of the registry protocol from the store,
// reading index.json at every request, and nothing else:
//
//	GET|HEAD /v2/                               ping
//	GET|HEAD /v2/<repo>/manifests/<tag|digest>  a stored image's manifest
//	GET|HEAD /v2/<repo>/blobs/<digest>          that image's config or a layer
//
// Other methods get 405, other paths (_catalog, tags/list, uploads) 404,
// and a request with a body 400, without its body being read.
type handler struct {
	store *Store
	log   *slog.Logger
}

// request is a parsed manifest or blob request.
type request struct {
	repo string // repository path as asked, e.g. "library/busybox"
	ns   string // registry named by ?ns=, normalized; "" when absent
	kind string // "manifests" or "blobs"
	ref  string // tag or digest
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Docker-Distribution-API-Version", "registry/2.0")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		h.refuse(w, r, http.StatusMethodNotAllowed, "UNSUPPORTED", "the node's image registry is read-only")
		return
	}
	if r.ContentLength != 0 { // -1 is a chunked body
		h.refuse(w, r, http.StatusBadRequest, "UNSUPPORTED", "requests must not have a body")
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/v2/")
	if r.URL.Path == "/v2" || (ok && rest == "") {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte("{}"))
		return
	}
	req, ok := parseRequest(rest, r.URL.Query().Get("ns"))
	if !ok {
		h.refuse(w, r, http.StatusNotFound, "NAME_UNKNOWN", "not served here")
		return
	}
	if req.kind == "manifests" {
		h.serveManifest(w, r, req)
		return
	}
	h.serveBlob(w, r, req)
}

// parseRequest splits "<repo>/manifests/<ref>" or "<repo>/blobs/<ref>".
// A repository path may itself contain "manifests" or "blobs"; the
// reference has no slash, so the last slash separates it.
func parseRequest(rest, ns string) (request, bool) {
	i := strings.LastIndexByte(rest, '/')
	if i < 0 {
		return request{}, false
	}
	prefix, ref := rest[:i], rest[i+1:]
	for _, kind := range []string{"manifests", "blobs"} {
		if repo, ok := strings.CutSuffix(prefix, "/"+kind); ok && repo != "" && ref != "" {
			return request{repo: repo, ns: namespace(ns), kind: kind, ref: ref}, true
		}
	}
	return request{}, false
}

func (h *handler) serveManifest(w http.ResponseWriter, r *http.Request, req request) {
	index, err := h.store.readIndex()
	if err != nil {
		h.fail(w, r, err)
		return
	}
	desc, ok := resolve(index, req)
	if !ok {
		h.refuse(w, r, http.StatusNotFound, "MANIFEST_UNKNOWN", "no image "+req.repo+":"+req.ref)
		return
	}
	data, err := h.store.readBlob(desc.Digest, maxManifestBytes)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	mediaType := desc.MediaType
	if mediaType == "" {
		mediaType = manifestMediaType(data)
	}
	w.Header().Set("Content-Type", string(mediaType))
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	w.Header().Set("Docker-Content-Digest", desc.Digest.String())
	w.Header().Set("ETag", strconv.Quote(desc.Digest.String()))
	if r.Method == http.MethodGet {
		w.Write(data)
	}
}

func (h *handler) serveBlob(w http.ResponseWriter, r *http.Request, req request) {
	digest, err := v1.NewHash(req.ref)
	if err != nil || !validDigest(digest) {
		h.refuse(w, r, http.StatusNotFound, "BLOB_UNKNOWN", "not a sha256 digest")
		return
	}
	index, err := h.store.readIndex()
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if !h.reachable(index, req, digest) {
		h.refuse(w, r, http.StatusNotFound, "BLOB_UNKNOWN", "no blob "+digest.String()+" in "+req.repo)
		return
	}
	f, _, err := h.store.openBlob(digest)
	if errors.Is(err, fs.ErrNotExist) {
		h.refuse(w, r, http.StatusNotFound, "BLOB_UNKNOWN", "no blob "+digest.String())
		return
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Docker-Content-Digest", digest.String())
	w.Header().Set("ETag", strconv.Quote(digest.String()))
	// ServeContent answers HEAD and Range requests and sets Content-Length.
	http.ServeContent(w, r, "", time.Time{}, f)
}

// resolve finds the image a manifest request names: by tag or by manifest
// digest, among the images the request's repository path and ?ns= select.
// When several match, a registry-qualified path beats a mirror path, and
// then the later reference (index.json is sorted) wins.
func resolve(index *v1.IndexManifest, req request) (v1.Descriptor, bool) {
	wantDigest, err := v1.NewHash(req.ref)
	byDigest := err == nil
	var best v1.Descriptor
	bestRank := 0
	for _, d := range index.Manifests {
		rank, ident := match(d, req)
		if rank == 0 || (byDigest && d.Digest != wantDigest) || (!byDigest && ident != req.ref) {
			continue
		}
		if rank >= bestRank {
			best, bestRank = d, rank
		}
	}
	return best, bestRank > 0
}

// reachable reports whether blob is the config or a layer of an image the
// request's repository path and ?ns= select.
func (h *handler) reachable(index *v1.IndexManifest, req request, blob v1.Hash) bool {
	for _, d := range index.Manifests {
		if rank, _ := match(d, req); rank == 0 {
			continue
		}
		data, err := h.store.readBlob(d.Digest, maxManifestBytes)
		if err != nil {
			h.log.Warn("reading a stored manifest", "ref", d.Annotations[RefNameAnnotation], "err", err)
			continue
		}
		m, err := v1.ParseManifest(bytes.NewReader(data))
		if err != nil {
			continue
		}
		if m.Config.Digest == blob {
			return true
		}
		for _, l := range m.Layers {
			if l.Digest == blob {
				return true
			}
		}
	}
	return false
}

// match ranks how well index entry d fits the request's repository: 0 not
// at all, 1 by mirror path, 2 by registry-qualified path or by ?ns=. It
// also returns the entry's tag or digest.
func match(d v1.Descriptor, req request) (rank int, ident string) {
	r, err := name.ParseReference(d.Annotations[RefNameAnnotation])
	if err != nil {
		return 0, ""
	}
	reg, repo := registryOf(r), r.Context().RepositoryStr()
	switch {
	case req.ns != "":
		if reg == req.ns && repo == req.repo {
			return 2, r.Identifier()
		}
	case pathSafeHost(reg) && reg+"/"+repo == req.repo:
		return 2, r.Identifier()
	case repo == req.repo:
		return 1, r.Identifier()
	}
	return 0, ""
}

// manifestMediaType reads the mediaType field of a manifest.
func manifestMediaType(data []byte) types.MediaType {
	var m struct {
		MediaType types.MediaType `json:"mediaType"`
	}
	if json.Unmarshal(data, &m) != nil || m.MediaType == "" {
		return types.OCIManifestSchema1
	}
	return m.MediaType
}

// refuse answers with a registry protocol error. A request whose body is
// left unread gets its connection closed rather than drained.
func (h *handler) refuse(w http.ResponseWriter, r *http.Request, code int, errCode, msg string) {
	h.log.Debug("image registry refused a request", "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr, "code", code)
	if r.ContentLength != 0 {
		w.Header().Set("Connection", "close")
	}
	body, _ := json.Marshal(map[string]any{"errors": []map[string]string{{"code": errCode, "message": msg}}})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(code)
	w.Write(body)
}

// fail answers 500 for a store that cannot be read, and logs why.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	h.log.Warn("image registry cannot serve a request", "method", r.Method, "path", r.URL.Path, "err", err)
	h.refuse(w, r, http.StatusInternalServerError, "UNKNOWN", "the image store cannot be read")
}

// namespace normalizes a ?ns= value to the registry host references name,
// or returns "" for a value that is not a registry host.
func namespace(ns string) string {
	if ns == "" || strings.Contains(ns, "/") {
		return ""
	}
	reg, err := name.NewRegistry(ns)
	if err != nil {
		return ""
	}
	host := reg.RegistryStr()
	switch host {
	case name.DefaultRegistry, "registry-1.docker.io":
		return dockerHub
	}
	return host
}

// pathSafeHost reports whether a registry host can serve as the first
// component of a repository path: lower-case letters, digits, dots and
// dashes, so no port.
func pathSafeHost(host string) bool {
	if host == "" {
		return false
	}
	for _, c := range host {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '.' && c != '-' {
			return false
		}
	}
	return true
}
