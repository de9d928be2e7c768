package server

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// secrets are put wherever a user can put one in the configuration or on
// the command line; none may come back.
var secrets = []string{"urlpass", "urluser", "querysecret", "fragsecret", "hdrsecret", "hdrsecret2", "tokvalue", "pwvalue"}

func secretConfig() *KubeletConfiguration {
	c := NewKubeletConfiguration()
	c.StaticPodPath = "/etc/nodelet/manifests"
	c.StaticPodURL = "https://urluser:urlpass@manifests.example:8443/pods/node-a.yaml?token=querysecret#fragsecret"
	c.StaticPodURLHeader = map[string][]string{"Authorization": {"Bearer hdrsecret"}, "X-Key": {"hdrsecret2", "hdrsecret"}}
	c.Port = 10250
	return c
}

func TestConfigzRedactsSecrets(t *testing.T) {
	deps, _, _ := testDeps()
	deps.Configz = secretConfig()
	code, body := do(t, open(t, deps), "GET", "/configz", nil)
	if code != 200 {
		t.Fatalf("/configz: %d %q", code, body)
	}
	for _, s := range secrets {
		if strings.Contains(body, s) {
			t.Errorf("/configz shows %q:\n%s", s, body)
		}
	}
	var got struct {
		KubeletConfig KubeletConfiguration `json:"kubeletconfig"`
	}
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	kc := got.KubeletConfig
	if kc.Kind != "KubeletConfiguration" || kc.APIVersion != "kubelet.config.k8s.io/v1beta1" || kc.Port != 10250 || kc.StaticPodPath != "/etc/nodelet/manifests" {
		t.Errorf("kubeletconfig: %+v", kc)
	}
	if want := "https://<redacted>@manifests.example:8443/pods/node-a.yaml?<redacted>"; kc.StaticPodURL != want {
		t.Errorf("staticPodURL %q, want %q", kc.StaticPodURL, want)
	}
	if h := kc.StaticPodURLHeader; !slices.Equal(h["Authorization"], []string{Redacted}) || !slices.Equal(h["X-Key"], []string{Redacted, Redacted}) {
		t.Errorf("staticPodURLHeader %v", h)
	}
	// The configuration itself is left as it was.
	if deps.Configz.StaticPodURLHeader["X-Key"][0] != "hdrsecret2" || !strings.Contains(deps.Configz.StaticPodURL, "urlpass") {
		t.Error("serving /configz changed the configuration")
	}
	for _, name := range []string{`"staticPodPath"`, `"staticPodURL"`, `"staticPodURLHeader"`, `"authentication"`, `"authorization"`, `"containerRuntimeEndpoint"`} {
		if !strings.Contains(body, name) {
			t.Errorf("/configz lacks %s:\n%s", name, body)
		}
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"":                                  "",
		"https://example.com/pods.yaml":     "https://example.com/pods.yaml",
		"http://u:p@example.com:80/a%20b":   "http://<redacted>@example.com:80/a%20b",
		"https://tok@example.com/":          "https://<redacted>@example.com/",
		"https://example.com/x?sig=abc&e=1": "https://example.com/x?<redacted>",
		"https://example.com/x?":            "https://example.com/x?<redacted>",
		"https://example.com/x#frag":        "https://example.com/x",
		"mailto:secret@example.com":         Redacted,
		"example.com/secret":                Redacted,
		"https://u:p%zz@example.com/":       Redacted, // does not parse
		"::not a url":                       Redacted,
	} {
		if got := RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestRedactArgs(t *testing.T) {
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
	got := RedactArgs(args)
	joined := strings.Join(got, " ")
	for _, s := range secrets {
		if strings.Contains(joined, s) {
			t.Errorf("RedactArgs left %q: %q", s, got)
		}
	}
	want := []string{
		"/usr/bin/nodelet",
		"--root-dir", "/var/lib/nodelet",
		"--manifest-url=https://<redacted>@h/p?<redacted>",
		"--manifest-url-header", "Authorization:<redacted>,X-Key:<redacted>",
		"--manifest-url-header=X-Other:<redacted>",
		"--manifest-url", "https://h/p",
		"-bootstrap-token=<redacted>",
		"--registry-password", "<redacted>",
		"--token-auth-file", "/etc/nodelet/tokens.csv",
		"--v=2",
	}
	if !slices.Equal(got, want) {
		t.Errorf("RedactArgs:\n got %q\nwant %q", got, want)
	}
	if args[3] != "--manifest-url=https://urluser:urlpass@h/p?token=querysecret" {
		t.Error("RedactArgs changed its argument")
	}
	// A secret flag at the end, without its value, is left alone.
	if got := RedactArgs([]string{"nodelet", "--manifest-url"}); !slices.Equal(got, []string{"nodelet", "--manifest-url"}) {
		t.Errorf("dangling flag: %q", got)
	}
}

func TestPprofCmdlineRedacts(t *testing.T) {
	deps, _, _ := testDeps()
	deps.Args = []string{"nodelet", "--manifest-url", "https://urluser:urlpass@h/p", "--manifest-url-header=Authorization:Bearer hdrsecret", "--port", "10250"}
	code, body := do(t, open(t, deps), "GET", "/debug/pprof/cmdline", nil)
	if code != 200 {
		t.Fatalf("cmdline: %d %q", code, body)
	}
	for _, s := range secrets {
		if strings.Contains(body, s) {
			t.Errorf("/debug/pprof/cmdline shows %q: %q", s, body)
		}
	}
	want := "nodelet\x00--manifest-url\x00https://<redacted>@h/p\x00--manifest-url-header=Authorization:<redacted>\x00--port\x0010250"
	if body != want {
		t.Errorf("cmdline %q, want %q", body, want)
	}
}
