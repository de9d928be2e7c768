package podsource

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// manyPods is a manifest of n pods, the first named web.
func manyPods(n int) string {
	docs := []string{goodPod}
	for i := 1; i < n; i++ {
		docs = append(docs, podYAML(fmt.Sprintf("web%d", i), "busybox:1.35"))
	}
	return strings.Join(docs, "---\n")
}

// manyContainers is goodPod with n containers in all: one init, n-1
// regular.
func manyContainers(n int) string {
	var b strings.Builder
	b.WriteString(strings.Replace(goodPod, "spec:\n", "spec:\n  initContainers:\n  - name: init\n    image: busybox:1.35\n", 1))
	for i := 2; i < n; i++ {
		fmt.Fprintf(&b, "  - name: c%d\n    image: busybox:1.35\n", i)
	}
	return b.String()
}

// manyObjects is goodPod and n ConfigMaps and Secrets.
func manyObjects(n int) string {
	var b strings.Builder
	b.WriteString(goodPod)
	for i := range n {
		kind := "ConfigMap"
		if i%2 == 1 {
			kind = "Secret"
		}
		fmt.Fprintf(&b, "---\napiVersion: v1\nkind: %s\nmetadata: {name: o%d}\n", kind, i)
	}
	return b.String()
}

// padded is goodPod padded with a comment to size bytes.
func padded(size int) string {
	pad := size - len(goodPod) - 2
	return goodPod + "#" + strings.Repeat("x", pad) + "\n"
}

func TestManifestFileCaps(t *testing.T) {
	for _, tc := range []struct {
		name    string
		content string
		class   string // "" if accepted
		reason  string
	}{
		{"size at the cap", padded(MaxManifestSize), "", ""},
		{"size over the cap", padded(MaxManifestSize + 1), ReasonTooLarge, "larger than the limit of 1572864 bytes"},
		{"pods at the cap", manyPods(MaxPodsPerFile), "", ""},
		{"pods over the cap", manyPods(MaxPodsPerFile + 1), ReasonTooManyPods, "more than 110 pods"},
		{"containers at the cap", manyContainers(MaxContainersPerPod), "", ""},
		{"containers over the cap", manyContainers(MaxContainersPerPod + 1), ReasonTooManyContainers, `pod "web" has 65 containers`},
		{"objects at the cap", manyObjects(MaxObjectsPerFile), "", ""},
		{"objects over the cap", manyObjects(MaxObjectsPerFile + 1), ReasonTooManyObjects, "more than 1000 ConfigMaps and Secrets"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "web.yaml")
			writeFile(t, path, tc.content)
			r := newManifestCache("n").read(path, false)
			if tc.class == "" {
				if r.err != nil || len(r.pods) == 0 {
					t.Fatalf("refused: %v (%s)", r.err, r.class)
				}
				return
			}
			if r.err == nil || r.class != tc.class || !strings.Contains(r.err.Error(), tc.reason) {
				t.Fatalf("class %q err %v; want %s, %q", r.class, r.err, tc.class, tc.reason)
			}
		})
	}
}

// Each cap refuses the new version of a file with an error naming the file
// and the cap, counted under its reason, and the last good version keeps
// running.
func TestFileSourceCapsKeepLastGood(t *testing.T) {
	for _, tc := range []struct {
		class, content, reason string
	}{
		{ReasonTooLarge, padded(MaxManifestSize + 1), "larger than the limit"},
		{ReasonTooManyPods, manyPods(MaxPodsPerFile + 1), "more than 110 pods"},
		{ReasonTooManyContainers, manyContainers(MaxContainersPerPod + 1), "more than the limit of 64"},
		{ReasonTooManyObjects, manyObjects(MaxObjectsPerFile + 1), "more than 1000 ConfigMaps"},
	} {
		t.Run(tc.class, func(t *testing.T) {
			dir := t.TempDir()
			h := startFileSource(t, dir, dir)
			h.write("web.yaml", goodPod)
			good := h.until("web-node1").Pods[0]

			h.write("web.yaml", tc.content)
			u := h.until("web-node1")
			for len(u.Errors) == 0 {
				u = h.until("web-node1")
			}
			if u.Pods[0].UID != good.UID {
				t.Errorf("the pod changed to %s", u.Pods[0].UID)
			}
			if len(u.Errors) != 1 || u.Errors[0].Class != tc.class || !u.Errors[0].Kept {
				t.Fatalf("errors %+v; want one kept %s", u.Errors, tc.class)
			}
			if lines := h.logs.lines("keeping the last good version", "web.yaml", tc.reason); len(lines) != 1 {
				t.Errorf("log lines %q", lines)
			}
			if n := h.metrics.get(tc.class); n != 1 {
				t.Errorf("%s counted %d times", tc.class, n)
			}
		})
	}
}

func TestHTTPSourceCaps(t *testing.T) {
	var list strings.Builder
	list.WriteString("apiVersion: v1\nkind: PodList\nitems:\n")
	for i := range MaxPodsPerURL + 1 {
		fmt.Fprintf(&list, "- metadata: {name: p%d}\n  spec: {containers: [{name: c, image: \"busybox:1.35\"}]}\n", i)
	}
	for _, tc := range []struct {
		name, body, class, reason string
		chunked                   bool
	}{
		{"pods", list.String(), ReasonTooManyPods, "more than 1000 pods", false},
		{"containers", manyContainers(MaxContainersPerPod + 1), ReasonTooManyContainers, "65 containers", false},
		{"body with a length", padded(MaxManifestURLBody + 1), ReasonTooLarge, "Content-Length 4194305", false},
		{"chunked body", padded(MaxManifestURLBody + 1), ReasonTooLarge, "body is larger than the limit of 4194304 bytes", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := startHTTPSource(t, http.StatusOK, "", goodPod)
			h.request()
			good := h.next().Pods[0]
			h.srv.set(http.StatusOK, "", tc.body)
			h.srv.chunked(tc.chunked)
			h.poll()
			u := h.next()
			if podNames(u) != "web-node1" || u.Pods[0].UID != good.UID {
				t.Errorf("pods %q, want the last good one", podNames(u))
			}
			if len(u.Errors) != 1 || u.Errors[0].Class != tc.class || !u.Errors[0].Kept || !strings.Contains(u.Errors[0].Reason(), tc.reason) {
				t.Fatalf("errors %+v; want one kept %s: %q", u.Errors, tc.class, tc.reason)
			}
			if n := h.metrics.get(tc.class); n != 1 {
				t.Errorf("%s counted %d times", tc.class, n)
			}
		})
	}
}

// The size cap is checked on the file read, not only on what stat said.
func TestReadLimited(t *testing.T) {
	data, err := readLimited(strings.NewReader("12345"), 5, "file")
	if err != nil || string(data) != "12345" {
		t.Fatalf("at the limit: %q %v", data, err)
	}
	if _, err := readLimited(strings.NewReader("123456"), 5, "file"); err == nil || errorClass(err, "") != ReasonTooLarge {
		t.Fatalf("over the limit: %v", err)
	}
}
