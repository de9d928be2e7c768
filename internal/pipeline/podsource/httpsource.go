package podsource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/pure/redact"
)

// httpTimeout bounds one fetch of the manifest URL.
const httpTimeout = 10 * time.Second

// maxRedirects is the most redirects followed in one fetch (as Go's
// default).
const maxRedirects = 10

// maxResponseHeader bounds the header of an answer.
const maxResponseHeader = 1 << 20

// HTTPSource polls a manifest URL (the kubelet's --manifest-url) and sends
// an Update each time the pods it defines change.
//
// The URL and its server are not trusted: the body is read up to
// MaxManifestURLBody bytes; a redirect to another scheme, host or port
// does not carry the headers given (Go's client would carry all but
// Authorization and Cookie); a redirect from https to http is refused; and
// the credentials of the URL (user info, and query parameters that look
// like credentials) are redacted wherever the URL is shown.
type HTTPSource struct {
	url      *url.URL // nil if the URL cannot be used, see urlErr
	urlErr   error
	display  string // the URL, redacted: for logs, errors and annotations
	header   http.Header
	nodeName string
	period   time.Duration
	clk      clock.WithTicker
	report   *reporter
	client   *http.Client

	// State of Run; HTTPSource is used by one goroutine.
	haveGood bool        // a good answer was read
	lastGood []*v1.Pod   // pods of the last good answer
	lastDups []FileError // duplicate names in the last good answer
	etag     string      // ETag of the last good answer
	sent     *Update     // last Update sent
}

// NewHTTPSource returns a source for url; header is sent with each request
// (--manifest-url-header). period is the poll period
// (DefaultCheckFrequency if 0). Each problem is counted in metrics and
// recorded in events as a Warning event about the node nodeName
// (EventReasonFailedToLoadManifest, naming the redacted URL); either may
// be nil.
// A URL that is not an absolute http or https URL makes every poll fail
// with an error saying so.
func NewHTTPSource(rawURL string, header http.Header, nodeName string, period time.Duration, clk clock.WithTicker, log *slog.Logger, metrics ErrorCounter, events EventSink) *HTTPSource {
	if period <= 0 {
		period = DefaultCheckFrequency
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &HTTPSource{
		header:   header.Clone(),
		nodeName: nodeName,
		period:   period,
		clk:      clk,
		report:   newReporter(log.With("source", SourceHTTP), metrics, events, nodeName),
	}
	s.url, s.display, s.urlErr = parseManifestURL(rawURL)
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxResponseHeaderBytes = maxResponseHeader
	s.client = &http.Client{Timeout: httpTimeout, Transport: transport, CheckRedirect: s.checkRedirect}
	return s
}

// parseManifestURL parses --manifest-url. The error does not quote the URL:
// a URL that does not parse cannot be redacted.
func parseManifestURL(raw string) (*url.URL, string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, redact.String(raw), errors.New("the manifest URL does not parse; want http[s]://[user:password@]host[:port]/path")
	}
	display := redact.URL(u)
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, display, fmt.Errorf("the manifest URL must be an absolute http or https URL, not scheme %q", u.Scheme)
	}
	return u, display, nil
}

// Run polls the URL at once and then every period until ctx is done. The
// first Update is sent after the first good answer: until the URL has been
// read, nothing is known about the pods it wants (the kubelet does the
// same). After that an Update is sent each time the snapshot changes; an
// answer that cannot be used keeps the last good pods.
func (s *HTTPSource) Run(ctx context.Context, out chan<- Update) {
	ticker := s.clk.NewTicker(s.period)
	defer ticker.Stop()
	for {
		if !s.poll(ctx, out) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C():
		}
	}
}

// poll fetches the URL once and sends an Update if the snapshot changed.
// It returns false if ctx ended.
func (s *HTTPSource) poll(ctx context.Context, out chan<- Update) bool {
	class, err := s.fetch(ctx)
	if ctx.Err() != nil {
		return false
	}
	u := Update{Source: SourceHTTP, Pods: s.lastGood, Errors: s.lastDups}
	if err != nil {
		u.Errors = append([]FileError{{Path: s.display, Class: class, Err: err, Kept: s.haveGood}}, u.Errors...)
		sortErrors(u.Errors)
	}
	s.report.report(u.Errors)
	if !s.haveGood || s.sent != nil && sameUpdate(*s.sent, u) {
		return true
	}
	return sendUpdate(ctx, out, &s.sent, u)
}

// fetch gets the URL and, if the answer is good, makes it the last good
// one; 304 Not Modified keeps it. On error it returns the Reason* class.
func (s *HTTPSource) fetch(ctx context.Context) (string, error) {
	if s.urlErr != nil {
		return ReasonRead, s.urlErr
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url.String(), nil)
	if err != nil {
		return ReasonRead, fmt.Errorf("manifest url: %w", redactError(err))
	}
	for k, vs := range s.header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	if s.etag != "" && s.haveGood {
		req.Header.Set("If-None-Match", s.etag)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		if _, ok := errors.AsType[*redirectError](err); ok {
			return ReasonRedirect, fmt.Errorf("fetch manifest url: %w", redactError(err))
		}
		return ReasonRead, fmt.Errorf("fetch manifest url: %w", redactError(err))
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotModified && s.haveGood:
		return "", nil
	case resp.StatusCode != http.StatusOK:
		return ReasonHTTPStatus, fmt.Errorf("fetch manifest url: status %s", resp.Status)
	case resp.ContentLength > MaxManifestURLBody:
		return ReasonTooLarge, tooLarge(fmt.Sprintf("body (Content-Length %d)", resp.ContentLength), MaxManifestURLBody)
	}
	data, err := readLimited(resp.Body, MaxManifestURLBody, "body")
	if err != nil {
		return errorClass(err, ReasonRead), fmt.Errorf("read manifest url body: %w", err)
	}
	// An empty body is a good answer: no pods (as for the kubelet).
	pods, class, err := parseManifests(data, true, nil, urlLimits, s.nodeName, SourceHTTP, s.display)
	if err != nil {
		return class, err
	}
	s.lastGood, s.lastDups = uniquePods(pods, s.display)
	sortPods(s.lastGood)
	s.haveGood = true
	s.etag = resp.Header.Get("ETag")
	return "", nil
}

// uniquePods keeps the first pod of each namespace and name, and reports
// the others as duplicates of origin.
func uniquePods(pods []*v1.Pod, origin string) ([]*v1.Pod, []FileError) {
	seen := map[string]bool{}
	var out []*v1.Pod
	var dups []FileError
	for _, p := range pods {
		key := p.Namespace + "/" + p.Name
		if seen[key] {
			dups = append(dups, FileError{Path: origin, Class: ReasonDuplicate,
				Err: fmt.Errorf("pod %s is defined more than once; the first is used", key)})
			continue
		}
		seen[key] = true
		out = append(out, p)
	}
	return out, dups
}

// redirectError is a redirect refused by checkRedirect.
type redirectError struct{ msg string }

func (e *redirectError) Error() string { return e.msg }

// checkRedirect is the client's redirect policy. It refuses a redirect
// from https to plain http, and strips what the first request should not
// share with another server once the redirects left its scheme, host and
// port: the headers given (--manifest-url-header) and the Referer, which
// Go's client sets to the previous URL, query and all.
func (s *HTTPSource) checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= maxRedirects {
		return fmt.Errorf("stopped after %d redirects", maxRedirects)
	}
	req.Header.Del("Referer")
	for _, prev := range via {
		if prev.URL.Scheme == "https" && req.URL.Scheme != "https" {
			return &redirectError{fmt.Sprintf("refused a redirect from https to %s (%s): it would be sent in clear text", req.URL.Scheme, redact.URL(req.URL))}
		}
	}
	first := via[0].URL
	for _, r := range append(via[1:], req) {
		if !sameOrigin(first, r.URL) {
			for k := range s.header {
				req.Header.Del(k)
			}
			break
		}
	}
	return nil
}

// sameOrigin tells whether a and b have the same scheme, host and port.
func sameOrigin(a, b *url.URL) bool {
	return strings.EqualFold(a.Scheme, b.Scheme) && strings.EqualFold(a.Hostname(), b.Hostname()) && port(a) == port(b)
}

func port(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	switch strings.ToLower(u.Scheme) {
	case "https":
		return "443"
	case "http":
		return "80"
	}
	return ""
}

// redactError redacts the URL of a *url.Error (Go's client shows the
// user name and the query, and the raw Location of a refused redirect).
func redactError(err error) error {
	ue, ok := errors.AsType[*url.Error](err)
	if !ok {
		return err
	}
	return &url.Error{Op: ue.Op, URL: redact.String(ue.URL), Err: ue.Err}
}
