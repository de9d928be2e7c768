package redact

import (
	"net/url"
	"slices"
	"strings"
	"testing"
)

func TestURL(t *testing.T) {
	for in, want := range map[string]string{
		"https://host/pods":                               "https://host/pods",
		"https://user:pass@host/pods":                     "https://REDACTED:REDACTED@host/pods",
		"https://tok3n@host/pods":                         "https://REDACTED@host/pods",
		"https://host/pods?a=1&token=x&b=2":               "https://host/pods?a=1&token=REDACTED&b=2",
		"https://host/p?access_token=x;sig=y&Signature=":  "https://host/p?access_token=REDACTED;sig=REDACTED&Signature=REDACTED",
		"https://host/p?X-Amz-Credential=a%2Fb&api_key=k": "https://host/p?X-Amz-Credential=REDACTED&api_key=REDACTED",
		"https://host/p?%74oken=x&node=n1":                "https://host/p?%74oken=REDACTED&node=n1",
		"https://host/p?flag&password":                    "https://host/p?flag&password",
		"https://host/p#access_token=x":                   "https://host/p",
	} {
		u, err := url.Parse(in)
		if err != nil {
			t.Fatal(err)
		}
		if got := URL(u); got != want {
			t.Errorf("URL(%s) = %s, want %s", in, got, want)
		}
		if got := String(in); got != want {
			t.Errorf("String(%s) = %s, want %s", in, got, want)
		}
	}
	for _, in := range []string{"http://a:b c@h", "https://u:p%zz@example.com/", "::not a url"} {
		if got := String(in); strings.Contains(got, "b c") || strings.Contains(got, "p%zz") || !strings.HasPrefix(got, Marker) {
			t.Errorf("unparsable URL %q shown as %q", in, got)
		}
	}
	if got := String(""); got != "" {
		t.Errorf(`String("") = %q`, got)
	}
}

func TestHeaders(t *testing.T) {
	h := map[string][]string{"Authorization": {"Bearer x"}, "X-Key": {"a", "b"}}
	got := Headers(h)
	if !slices.Equal(got["Authorization"], []string{Marker}) || !slices.Equal(got["X-Key"], []string{Marker, Marker}) {
		t.Errorf("Headers = %v", got)
	}
	if h["X-Key"][0] != "a" {
		t.Error("Headers changed its argument")
	}
	if Headers(nil) != nil {
		t.Error("Headers(nil) is not nil")
	}
}

func TestArgs(t *testing.T) {
	args := []string{
		"/usr/bin/nodelet",
		"--root-dir", "/var/lib/nodelet",
		"--manifest-url=https://urluser:urlpass@h/p?token=querysecret",
		"--manifest-url-header", "Authorization:Bearer hdrsecret,X-Key:hdrsecret2",
		"--manifest-url-header=X-Other:hdrsecret",
		"--manifest-url", "https://h/p#fragsecret",
		"-bootstrap-token=tokvalue",
		"--registry-password", "pwvalue",
		"--token-auth-file", "/etc/nodelet/tokens.csv",
		"--v=2",
	}
	got := Args(args)
	joined := strings.Join(got, " ")
	for _, s := range []string{"urlpass", "urluser", "querysecret", "fragsecret", "hdrsecret", "hdrsecret2", "tokvalue", "pwvalue"} {
		if strings.Contains(joined, s) {
			t.Errorf("Args left %q: %q", s, got)
		}
	}
	want := []string{
		"/usr/bin/nodelet",
		"--root-dir", "/var/lib/nodelet",
		"--manifest-url=https://REDACTED:REDACTED@h/p?token=REDACTED",
		"--manifest-url-header", "Authorization:REDACTED,X-Key:REDACTED",
		"--manifest-url-header=X-Other:REDACTED",
		"--manifest-url", "https://h/p",
		"-bootstrap-token=REDACTED",
		"--registry-password", "REDACTED",
		"--token-auth-file", "/etc/nodelet/tokens.csv",
		"--v=2",
	}
	if !slices.Equal(got, want) {
		t.Errorf("Args:\n got %q\nwant %q", got, want)
	}
	if args[3] != "--manifest-url=https://urluser:urlpass@h/p?token=querysecret" {
		t.Error("Args changed its argument")
	}
	// A secret flag at the end, without its value, is left alone.
	if got := Args([]string{"nodelet", "--manifest-url"}); !slices.Equal(got, []string{"nodelet", "--manifest-url"}) {
		t.Errorf("dangling flag: %q", got)
	}
}
