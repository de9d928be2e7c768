package podsource

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
)

// httpTimeout bounds one fetch of the manifest URL.
const httpTimeout = 10 * time.Second

// HTTPSource polls a manifest URL (the kubelet's --manifest-url) and sends
// an Update each time the pods it defines change.
type HTTPSource struct {
	url      string
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
// (DefaultCheckFrequency if 0). metrics may be nil.
func NewHTTPSource(url string, header http.Header, nodeName string, period time.Duration, clk clock.WithTicker, log *slog.Logger, metrics ErrorCounter) *HTTPSource {
	if period <= 0 {
		period = DefaultCheckFrequency
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &HTTPSource{
		url:      url,
		header:   header.Clone(),
		nodeName: nodeName,
		period:   period,
		clk:      clk,
		report:   newReporter(log.With("source", SourceHTTP), metrics),
		client:   &http.Client{Timeout: httpTimeout},
	}
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
		u.Errors = append([]FileError{{Path: s.url, Class: class, Err: err, Kept: s.haveGood}}, u.Errors...)
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
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return ReasonRead, fmt.Errorf("manifest url: %w", err)
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
		return ReasonRead, fmt.Errorf("fetch manifest url: %w", err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotModified && s.haveGood:
		return "", nil
	case resp.StatusCode != http.StatusOK:
		return ReasonHTTPStatus, fmt.Errorf("fetch manifest url: status %s", resp.Status)
	}
	if resp.ContentLength > MaxManifestURLBody {
		return ReasonTooLarge, tooLarge(fmt.Sprintf("body (Content-Length %d)", resp.ContentLength), MaxManifestURLBody)
	}
	data, err := readLimited(resp.Body, MaxManifestURLBody, "body")
	if err != nil {
		return errorClass(err, ReasonRead), fmt.Errorf("read manifest url body: %w", err)
	}
	// An empty body is a good answer: no pods (as for the kubelet).
	pods, class, err := parseManifests(data, true, nil, urlLimits, s.nodeName, SourceHTTP, s.url)
	if err != nil {
		return class, err
	}
	s.lastGood, s.lastDups = uniquePods(pods, s.url)
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
