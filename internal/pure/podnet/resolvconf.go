package podnet

import (
	"errors"
	"strings"
)

// ResolvConf is the part of a resolv.conf the kubelet uses.
type ResolvConf struct {
	Nameservers []string
	Searches    []string
	Options     []string
}

// ParseResolvConf parses the content of a resolv.conf:
//
//   - lines starting with '#' or ';' (after blanks) are comments;
//   - "nameserver ADDR" lines accumulate (extra fields are ignored); a
//     nameserver line without an address is an error, as in the kubelet;
//   - "search D1 D2 ..." and "domain D" lines replace the search list, the
//     last one winning (resolv.conf(5)); trailing dots are dropped and "."
//     entries skipped, so "a.b." and "a.b" count once;
//   - "options O1 O2 ..." lines accumulate, an option given again (same
//     name before ':') replacing the earlier one in place;
//   - other lines are ignored.
func ParseResolvConf(content []byte) (ResolvConf, error) {
	var rc ResolvConf
	var errs []error
	for line := range strings.Lines(string(content)) {
		fields := strings.Fields(line)
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") || strings.HasPrefix(fields[0], ";") {
			continue
		}
		switch fields[0] {
		case "nameserver":
			if len(fields) < 2 {
				errs = append(errs, errors.New("nameserver list is empty"))
				continue
			}
			rc.Nameservers = append(rc.Nameservers, fields[1])
		case "search", "domain":
			var searches []string
			for _, s := range fields[1:] {
				if s = strings.TrimSuffix(s, "."); s != "" {
					searches = append(searches, s)
				}
			}
			rc.Searches = omitDuplicates(searches)
		case "options":
			rc.Options = mergeOptions(rc.Options, fields[1:])
		}
	}
	return rc, errors.Join(errs...)
}

// optionName is the name of a resolver option ("ndots" of "ndots:5").
func optionName(opt string) string {
	name, _, _ := strings.Cut(opt, ":")
	return name
}

// mergeOptions adds options to existing, one replacing an existing option of
// the same name in place. It returns a new slice.
func mergeOptions(existing, options []string) []string {
	out := append([]string(nil), existing...)
	for _, opt := range options {
		replaced := false
		for i, o := range out {
			if optionName(o) == optionName(opt) {
				out[i], replaced = opt, true
				break
			}
		}
		if !replaced {
			out = append(out, opt)
		}
	}
	return out
}

// omitDuplicates returns strs without repeated entries, first occurrence
// first. It returns a new slice (nil when empty).
func omitDuplicates(strs []string) []string {
	var out []string
	seen := make(map[string]bool, len(strs))
	for _, s := range strs {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
