package testutil

import (
	"strconv"
	"strings"
	"time"
)

// GoldenLine is one input line of a golden-file test: a kind, then words
// and key=value pairs (the plan and status golden files read theirs so).
type GoldenLine struct {
	Kind string
	// Fields are everything after the kind, in order; Words are those
	// that are not key=value pairs, KV those that are.
	Fields []string
	Words  []string
	KV     map[string]string
}

// ParseGoldenLine splits a non-empty line into a GoldenLine.
func ParseGoldenLine(s string) GoldenLine {
	f := strings.Fields(s)
	l := GoldenLine{Kind: f[0], Fields: f[1:], KV: map[string]string{}}
	for _, w := range f[1:] {
		if k, v, ok := strings.Cut(w, "="); ok {
			l.KV[k] = v
		} else {
			l.Words = append(l.Words, w)
		}
	}
	return l
}

// Has reports whether word is one of the line's words.
func (l GoldenLine) Has(word string) bool {
	for _, w := range l.Words {
		if w == word {
			return true
		}
	}
	return false
}

// List is the value of key written as a list, "(a,b,c)"; nil if absent
// or empty.
func (l GoldenLine) List(key string) []string {
	v := strings.TrimSuffix(strings.TrimPrefix(l.KV[key], "("), ")")
	if v == "" {
		return nil
	}
	return strings.Split(v, ",")
}

// Int is the value of key as an integer, def if absent.
func (l GoldenLine) Int(key string, def int) (int, error) {
	v, ok := l.KV[key]
	if !ok {
		return def, nil
	}
	return strconv.Atoi(v)
}

// Duration is the value of key as a time.Duration, def if absent.
func (l GoldenLine) Duration(key string, def time.Duration) (time.Duration, error) {
	v, ok := l.KV[key]
	if !ok {
		return def, nil
	}
	return time.ParseDuration(v)
}
