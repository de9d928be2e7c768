package credprovider

import (
	"encoding/binary"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nodelet/nodelet/internal/pure/pullcreds"
)

// globalKey is the Global cache key; angle brackets keep it apart from any
// image or registry.
const globalKey = "<global>"

// purgeInterval is how often expired entries nobody asks for are dropped.
const purgeInterval = 15 * time.Minute

// cache holds one provider's answers until they expire. Keys are built by
// cacheKey; they hold no secret (a token only as its hash).
type cache struct {
	mu        sync.Mutex
	entries   map[string]cached
	lastPurge time.Time
}

type cached struct {
	auth    pullcreds.Config
	expires time.Time
}

func newCache(now time.Time) *cache {
	return &cache{entries: map[string]cached{}, lastPurge: now}
}

// get returns what is cached for image at now: under the image, then its
// registry, then the global key (the kubelet's order), for the service
// account key saKey ("" without one).
func (c *cache) get(image, saKey string, now time.Time) (pullcreds.Config, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now.After(c.lastPurge.Add(purgeInterval)) {
		maps.DeleteFunc(c.entries, func(_ string, e cached) bool { return now.After(e.expires) })
		c.lastPurge = now
	}
	for _, base := range []string{image, registryOf(image), globalKey} {
		k := cacheKey(base, saKey)
		e, ok := c.entries[k]
		if !ok {
			continue
		}
		if now.After(e.expires) {
			delete(c.entries, k)
			continue
		}
		return e.auth, true
	}
	return nil, false
}

func (c *cache) put(base, saKey string, auth pullcreds.Config, expires time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.entries[cacheKey(base, saKey)] = cached{auth: auth, expires: expires}
}

func (c *cache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

// keyBuilder joins strings unambiguously: each with its length first.
type keyBuilder []byte

func (b keyBuilder) add(s string) keyBuilder {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

func (b keyBuilder) addMap(m map[string]string) keyBuilder {
	keys := slices.Sorted(maps.Keys(m))
	b = binary.BigEndian.AppendUint32(b, uint32(len(keys)))
	for _, k := range keys {
		b = b.add(k).add(m[k])
	}
	return b
}

func cacheKey(base, saKey string) string { return string(keyBuilder(nil).add(base).add(saKey)) }

// registryOf is the first part of an image's repository (its registry
// host and port), the Registry cache key.
func registryOf(image string) string {
	reg, _, _ := strings.Cut(image, "/")
	return reg
}
