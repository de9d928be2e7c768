package podconfig

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/pipeline/podsource"
	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// Config merges the Updates of the configured sources (Run) into the
// current set of pods (Pods) and a stream of operations (Updates).
type Config struct {
	sources []string
	clk     clock.PassiveClock
	log     *slog.Logger
	// updates is unbuffered: Run delivers each operation to the consumer
	// before it reads the next source Update, which back-pressures the
	// sources.
	updates chan PodUpdate

	mu        sync.Mutex
	state     State
	ignored   map[string]bool // unknown sources already warned about
	conflicts map[string]bool // cross-source name conflicts already warned about
}

// New returns a Config for the given sources (podsource.SourceFile,
// podsource.SourceHTTP), in order of precedence: when two sources define a
// pod of the same namespace and name, Pods gives the one of the first.
// clk stamps the kubernetes.io/config.seen annotation.
func New(sources []string, clk clock.PassiveClock, log *slog.Logger) *Config {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var uniq []string
	for _, s := range sources {
		if !slices.Contains(uniq, s) {
			uniq = append(uniq, s)
		}
	}
	return &Config{
		sources:   uniq,
		clk:       clk,
		log:       log,
		updates:   make(chan PodUpdate),
		state:     State{},
		ignored:   map[string]bool{},
		conflicts: map[string]bool{},
	}
}

// Updates is the stream of operations, in the order Merge made them, source
// Update after source Update. It is never closed.
func (c *Config) Updates() <-chan PodUpdate { return c.updates }

// Run merges the Updates read from in until ctx is done or in is closed.
// The merged state (Pods, SourcesReady) changes before the operations that
// lead to it are delivered on Updates.
func (c *Config) Run(ctx context.Context, in <-chan podsource.Update) {
	for {
		var u podsource.Update
		var ok bool
		select {
		case <-ctx.Done():
			return
		case u, ok = <-in:
			if !ok {
				return
			}
		}
		for _, op := range c.merge(u) {
			select {
			case c.updates <- op:
			case <-ctx.Done():
				return
			}
		}
	}
}

func (c *Config) merge(u podsource.Update) []PodUpdate {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !slices.Contains(c.sources, u.Source) {
		if !c.ignored[u.Source] {
			c.ignored[u.Source] = true
			c.log.Warn("update from a source that is not configured; ignored", "source", u.Source, "configured", c.sources)
		}
		return nil
	}
	var ops []PodUpdate
	c.state, ops = Merge(c.state, u, c.clk.Now())
	c.warnConflicts()
	return ops
}

// warnConflicts logs each pod name defined by two sources once, for as long
// as the conflict lasts. c.mu is held.
func (c *Config) warnConflicts() {
	owner := map[string]string{} // namespace/name -> first source
	current := map[string]bool{}
	for _, source := range c.sources {
		for _, p := range sorted(c.state[source]) {
			name := p.Namespace + "/" + p.Name
			first, taken := owner[name]
			if !taken {
				owner[name] = source
				continue
			}
			key := name + "\x00" + source
			current[key] = true
			if !c.conflicts[key] {
				c.log.Warn("pod defined by two sources; the first source's is used", "pod", name, "used", first, "ignored", source)
			}
		}
	}
	c.conflicts = current
}

// SourcesReady tells whether every configured source has sent at least one
// Update. Before that, a pod running on the node that no source defines may
// still be wanted by a source not yet heard from: nothing may be removed as
// orphaned.
func (c *Config) SourcesReady() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.sources {
		if _, ok := c.state[s]; !ok {
			return false
		}
	}
	return true
}

// Pods is the current merged set of pods of all sources, sorted by
// namespace and name; a namespace and name defined by two sources is the
// pod of the first configured one. The caller owns the pods.
func (c *Config) Pods() []*v1.Pod { return c.pods(nil) }

// StaticPods is the part of Pods that are static pods (from the file and
// URL sources), without copying the others: what the mirror manager
// looks at every 2 s.
func (c *Config) StaticPods() []*v1.Pod { return c.pods(podspec.IsStatic) }

// pods is Pods, of the pods keep keeps (nil: all).
func (c *Config) pods(keep func(*v1.Pod) bool) []*v1.Pod {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*v1.Pod
	taken := map[string]bool{}
	for _, source := range c.sources {
		for _, p := range sorted(c.state[source]) {
			name := p.Namespace + "/" + p.Name
			if taken[name] {
				continue
			}
			taken[name] = true
			if keep == nil || keep(p) {
				out = append(out, p.DeepCopy())
			}
		}
	}
	sortPods(out)
	return out
}

// sorted returns the pods of one source, sorted; not copied.
func sorted(pods map[types.UID]*v1.Pod) []*v1.Pod {
	out := slices.Collect(maps.Values(pods))
	sortPods(out)
	return out
}
