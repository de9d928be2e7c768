package server

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/nodelet/nodelet/internal/pure/redact"
)

// secrets are put wherever a user can put one in the configuration or on
// the command line; none may come back.
var secrets = []string{"urlpass", "urluser", "querysecret", "fragsecret", "hdrsecret", "hdrsecret2", "tokvalue", "pwvalue"}

func secretConfig() *Configz {
	c := NewConfigz()
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
		KubeletConfig Configz `json:"kubeletconfig"`
	}
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	kc := got.KubeletConfig
	if kc.Kind != "KubeletConfiguration" || kc.APIVersion != "kubelet.config.k8s.io/v1beta1" || kc.Port != 10250 || kc.StaticPodPath != "/etc/nodelet/manifests" {
		t.Errorf("kubeletconfig: %+v", kc)
	}
	if want := "https://REDACTED:REDACTED@manifests.example:8443/pods/node-a.yaml?token=REDACTED"; kc.StaticPodURL != want {
		t.Errorf("staticPodURL %q, want %q", kc.StaticPodURL, want)
	}
	if h := kc.StaticPodURLHeader; !slices.Equal(h["Authorization"], []string{redact.Marker}) || !slices.Equal(h["X-Key"], []string{redact.Marker, redact.Marker}) {
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
	want := "nodelet\x00--manifest-url\x00https://REDACTED:REDACTED@h/p\x00--manifest-url-header=Authorization:REDACTED\x00--port\x0010250"
	if body != want {
		t.Errorf("cmdline %q, want %q", body, want)
	}
}
