package podsource

import (
	"slices"
	"testing"
	"time"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
)

// The sources are those the configuration sets, in the merge's order.
func TestNewSources(t *testing.T) {
	informer := informers.NewSharedInformerFactory(fake.NewClientset(), 0).Core().V1().Pods().Informer()
	for _, tt := range []struct {
		name string
		cfg  Config
		want []string
	}{
		{"none", Config{}, nil},
		{"file", Config{ManifestPath: "/etc/kubernetes/manifests"}, []string{SourceFile}},
		{"all", Config{ManifestPath: "/m", ManifestURL: "http://h/m", APIPods: informer}, []string{SourceFile, SourceHTTP, SourceAPI}},
		{"url and API", Config{ManifestURL: "http://h/m", APIPods: informer}, []string{SourceHTTP, SourceAPI}},
	} {
		tt.cfg.NodeName, tt.cfg.FileCheckFrequency, tt.cfg.HTTPCheckFrequency = "n", time.Second, time.Second
		sources, names := NewSources(tt.cfg, SourceDeps{})
		if !slices.Equal(names, tt.want) || len(sources) != len(names) {
			t.Errorf("%s: names %q and %d sources, want %q", tt.name, names, len(sources), tt.want)
		}
	}
}
