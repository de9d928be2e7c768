package podsource

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// Source is one source of pods: it sends its pods on out until ctx ends.
type Source interface {
	Run(ctx context.Context, out chan<- Update)
}

// Config says which sources there are.
type Config struct {
	NodeName string
	// ManifestPath (--pod-manifest-path), when set, is a file or
	// directory of static pod manifests read every FileCheckFrequency.
	ManifestPath       string
	FileCheckFrequency time.Duration
	// ManifestURL (--manifest-url), when set, is fetched with
	// ManifestHeader every HTTPCheckFrequency.
	ManifestURL        string
	ManifestHeader     http.Header
	HTTPCheckFrequency time.Duration
	// APIPods, when set (cluster mode), is the informer of the pods bound
	// to the node: the API source.
	APIPods cache.SharedIndexInformer
}

// SourceDeps are what the sources use.
type SourceDeps struct {
	Clock   clock.WithTicker
	Log     *slog.Logger
	Metrics ErrorCounter
	Events  EventSink
}

// NewSources returns the sources cfg sets, in the order the merge sees
// them (file, HTTP, API), and their names (SourceFile, SourceHTTP,
// SourceAPI). It starts nothing.
func NewSources(cfg Config, deps SourceDeps) ([]Source, []string) {
	var sources []Source
	var names []string
	if cfg.ManifestPath != "" {
		sources = append(sources, NewFileSource(cfg.ManifestPath, cfg.NodeName, cfg.FileCheckFrequency,
			deps.Clock, deps.Log, deps.Metrics, deps.Events))
		names = append(names, SourceFile)
	}
	if cfg.ManifestURL != "" {
		sources = append(sources, NewHTTPSource(cfg.ManifestURL, cfg.ManifestHeader, cfg.NodeName, cfg.HTTPCheckFrequency,
			deps.Clock, deps.Log, deps.Metrics, deps.Events))
		names = append(names, SourceHTTP)
	}
	if cfg.APIPods != nil {
		sources = append(sources, NewAPISource(cfg.APIPods, deps.Log))
		names = append(names, SourceAPI)
	}
	return sources, names
}
