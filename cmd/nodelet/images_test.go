package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// An archive over --max-archive-size fails with an error that names the
// limit and the flag; a size that is no size is refused before anything
// is read.
func TestImagesImportSizeLimit(t *testing.T) {
	root := t.TempDir()
	archive := filepath.Join(t.TempDir(), "app.tar")
	if err := os.WriteFile(archive, make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		limit string
		want  []string
	}{
		{"1Ki", []string{archive, "over the limit of 1024 bytes", "--max-archive-size"}},
		{"0", []string{"--max-archive-size", "positive size"}},
		{"lots", []string{"--max-archive-size", "positive size"}},
	}
	for _, tt := range tests {
		cmd := newImagesCommand(&root)
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs([]string{"import", archive, "--max-archive-size", tt.limit})
		err := cmd.Execute()
		if err == nil {
			t.Errorf("--max-archive-size %s: import succeeded", tt.limit)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("--max-archive-size %s: error %q does not say %q", tt.limit, err, w)
			}
		}
	}
}
