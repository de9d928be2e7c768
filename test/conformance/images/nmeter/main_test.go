package main

import (
	"testing"
	"time"
)

func TestRender(t *testing.T) {
	at := time.Date(2026, 11, 24, 6, 7, 8, 123456789, time.UTC)
	for _, tt := range []struct{ format, want string }{
		{"%3t", "06:07:08.123"},
		{"%t", "06:07:08"},
		{"at %6t %%", "at 06:07:08.123456 %"},
		{"%9t", "06:07:08.123456"},
	} {
		parts, err := parse(tt.format)
		if err != nil {
			t.Fatalf("parse(%q): %v", tt.format, err)
		}
		if got := render(parts, at); got != tt.want {
			t.Errorf("%q: got %q, want %q", tt.format, got, tt.want)
		}
	}
	for _, bad := range []string{"%c", "%3", "%x%t"} {
		if _, err := parse(bad); err == nil {
			t.Errorf("parse(%q) accepted", bad)
		}
	}
}
