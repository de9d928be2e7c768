package podsource

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodelet/nodelet/internal/pure/podspec"
	v1 "k8s.io/api/core/v1"
)

// fuzzSeeds are the manifests of the tests and of examples/.
func fuzzSeeds(f *testing.F) []string {
	seeds := []string{
		"", "---\n", "# only a comment\n",
		goodPod, withObjects, manyContainers(3), manyObjects(2), manyPods(3),
		goodPod + "---\n" + podYAML("web", "busybox:1.36"),
		`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"j"},"spec":{"containers":[{"name":"c","image":"i:1"}]}}`,
		"apiVersion: v1\nkind: PodList\nitems:\n- metadata: {name: a}\n  spec: {containers: [{name: c, image: \"busybox:1.35\"}]}\n",
		"apiVersion: v1\nkind: Pod\nmetadata: {name: c}\nspec: {containers: [{name: x}]}\n",
		`{"apiVersion": "v1", "kind": "Service"}`,
		strings.Replace(goodPod, "  name: web", "  name: web\n  name: web2", 1),
		"a: &a [*a, *a]\n",
	}
	examples, err := filepath.Glob("../../../examples/*.yaml")
	if err != nil {
		f.Fatal(err)
	}
	for _, path := range examples {
		data, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		seeds = append(seeds, string(data))
	}
	return seeds
}

// FuzzManifest feeds bytes through what a manifest file (fromURL false) or
// a manifest URL body (true) goes through after it is read: decode, the
// caps, validation, ConfigMaps and Secrets, and the static pod identity.
// It must not panic, and every pod accepted must be one nodelet can run
// and record: named for this node, with a UID derived from its content,
// within the caps, and stable when encoded and decoded again.
func FuzzManifest(f *testing.F) {
	for _, seed := range fuzzSeeds(f) {
		f.Add([]byte(seed), false)
		f.Add([]byte(seed), true)
	}
	f.Fuzz(func(t *testing.T, data []byte, fromURL bool) {
		lim, source, objects := fileLimits, SourceFile, &Objects{}
		if fromURL {
			lim, source, objects = urlLimits, SourceHTTP, nil
		}
		if len(data) > lim.size {
			return // refused before it is decoded
		}
		pods, class, err := parseManifests(data, fromURL, objects, lim, "node1", source, "origin")
		if err != nil {
			if class == "" {
				t.Fatalf("error without a class: %v", err)
			}
			return
		}
		if objects != nil {
			if err := objects.validate(); err != nil {
				return
			}
			if n := len(objects.ConfigMaps) + len(objects.Secrets); n > lim.objects {
				t.Fatalf("%d objects accepted", n)
			}
		}
		if len(pods) > lim.pods {
			t.Fatalf("%d pods accepted", len(pods))
		}
		var againObjects *Objects
		if objects != nil {
			againObjects = &Objects{}
		}
		again, _, err := parseManifests(data, fromURL, againObjects, lim, "node1", source, "origin")
		if err != nil || len(again) != len(pods) {
			t.Fatalf("second parse: %d pods, %v", len(again), err)
		}
		for i, p := range pods {
			checkStaticPod(t, p, source)
			if again[i].UID != p.UID {
				t.Fatalf("pod %s: UID %s then %s", p.Name, p.UID, again[i].UID)
			}
		}
	})
}

func checkStaticPod(t *testing.T, p *v1.Pod, source string) {
	t.Helper()
	if !strings.HasSuffix(p.Name, "-node1") || p.Name == "-node1" || p.Namespace == "" || p.Spec.NodeName != "node1" {
		t.Fatalf("identity: %s/%s on %q", p.Namespace, p.Name, p.Spec.NodeName)
	}
	if len(p.UID) != 32 || p.Annotations[podspec.AnnotationConfigHash] != string(p.UID) ||
		p.Annotations[podspec.AnnotationConfigSource] != source || p.Annotations[podspec.AnnotationConfigFile] != "origin" {
		t.Fatalf("pod %s: UID %q annotations %v", p.Name, p.UID, p.Annotations)
	}
	n := len(p.Spec.InitContainers) + len(p.Spec.Containers) + len(p.Spec.EphemeralContainers)
	if len(p.Spec.Containers) == 0 || n > MaxContainersPerPod {
		t.Fatalf("pod %s: %d containers", p.Name, n)
	}
	if p.Spec.RestartPolicy == "" || p.Spec.TerminationGracePeriodSeconds == nil {
		t.Fatalf("pod %s: not defaulted", p.Name)
	}
	// Encoded and decoded strictly, once to normalize (times lose their
	// fraction of a second, quantities take their canonical form), the pod
	// is then stable.
	first := roundTrip(t, p)
	second := roundTrip(t, first)
	a, _ := json.Marshal(first)
	b, _ := json.Marshal(second)
	if !bytes.Equal(a, b) {
		t.Fatalf("pod %s changes when encoded again:\n%s\n%s", p.Name, a, b)
	}
}

func roundTrip(t *testing.T, p *v1.Pod) *v1.Pod {
	t.Helper()
	data, err := json.Marshal(p)
	if err != nil {
		t.Fatalf("encode pod %s: %v", p.Name, err)
	}
	pods, err := decode(data, false, nil, fileLimits)
	if err != nil || len(pods) != 1 {
		t.Fatalf("decode pod %s again: %v\n%s", p.Name, err, data)
	}
	return pods[0]
}
