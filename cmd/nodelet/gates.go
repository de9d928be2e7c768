package main

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// gatesFlag is --feature-gates: comma-separated name=bool pairs, as the
// kubelet's mapStringBool; each Set adds to what earlier ones set, and
// String gives back what Set takes, so that the flag can be set again over
// --config's file.
type gatesFlag map[string]bool

func (g gatesFlag) String() string {
	pairs := make([]string, 0, len(g))
	for _, name := range slices.Sorted(maps.Keys(g)) {
		pairs = append(pairs, fmt.Sprintf("%s=%t", name, g[name]))
	}
	return strings.Join(pairs, ",")
}

func (g gatesFlag) Set(value string) error {
	for pair := range strings.SplitSeq(value, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		name, v, ok := strings.Cut(pair, "=")
		on, err := strconv.ParseBool(strings.TrimSpace(v))
		if !ok || err != nil {
			return fmt.Errorf("%q: want name=true or name=false", pair)
		}
		g[strings.TrimSpace(name)] = on
	}
	return nil
}

func (gatesFlag) Type() string { return "mapStringBool" }
