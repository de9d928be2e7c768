package main

import (
	"bytes"
	"errors"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nodelet/nodelet/internal/managed/containerd"
	"github.com/nodelet/nodelet/internal/nodeconfig"
	"github.com/nodelet/nodelet/internal/serve/server"
)

func TestExitCodePrintsOneLine(t *testing.T) {
	var out bytes.Buffer
	if code := exitCode(&out, errors.New("first\nsecond\n")); code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
	if got := out.String(); got != "nodelet: first; second\n" {
		t.Errorf("printed %q", got)
	}
	out.Reset()
	if code := exitCode(&out, nil); code != 0 || out.Len() != 0 {
		t.Errorf("nil error: code %d, printed %q", code, out.String())
	}
}

// A node name the API server would refuse is refused at start, saying where
// it came from and what would do instead.
func TestInvalidNodeNameIsRefusedAtStart(t *testing.T) {
	for _, tc := range []struct{ override, want string }{
		{"my_host", `node name "my_host" is not valid`},
		{"Edge_Node.01", `such as "edge-node.01"`},
		{"-x-", `from --hostname-override`},
	} {
		var out bytes.Buffer
		cmd := newRootCommand(&out, &out)
		cmd.SetArgs([]string{"--hostname-override", tc.override, "--root-dir", t.TempDir()})
		err := cmd.Execute()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--hostname-override %q: %v, want an error with %q", tc.override, err, tc.want)
		}
	}
}

func TestSuggestNodeName(t *testing.T) {
	for in, want := range map[string]string{
		"my_host":      "my-host",
		"Edge_Node.01": "edge-node.01",
		"__":           "node-1",
		"a.b-c":        "a.b-c",
	} {
		got := suggestNodeName(in)
		if got != want {
			t.Errorf("suggestNodeName(%q) = %q, want %q", in, got, want)
		}
		if err := nodeconfig.ValidateNodeName(got); err != nil {
			t.Errorf("suggestion %q is not valid: %v", got, err)
		}
	}
}

// The secure port's defaults depend on the mode: standalone, admins
// (system:masters) do anything and authenticated clients only read; in
// cluster mode (--kubeconfig), whether or not --config sets them, the
// kubelet's config-file defaults: webhook authentication and Webhook
// authorization, anonymous off. What a file or a flag sets wins.
func TestAuthorizationDefaults(t *testing.T) {
	f := newRootCommand(io.Discard, io.Discard).Flags()
	for name, want := range map[string]string{
		"authorization-read-group": "system:authenticated",
		"anonymous-auth":           "false",
	} {
		if got := f.Lookup(name).DefValue; got != want {
			t.Errorf("--%s defaults to %q, want %q", name, got, want)
		}
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	silent := writeConfig(t, "maxPods: 20\n")
	groups := writeConfig(t, "authorization:\n  mode: NodeletGroups\nauthentication:\n  webhook:\n    enabled: false\n")
	for _, tc := range []struct {
		name       string
		args       []string
		mode       string
		webhook    bool
		anonymous  bool
		insecure   bool // a Node Warning event says what any cluster identity can do
		insecureOf string
	}{
		{name: "standalone", mode: "NodeletGroups"},
		{name: "standalone, file silent", args: []string{"--config", silent}, mode: "NodeletGroups"},
		{name: "cluster", args: []string{"--kubeconfig", kubeconfig}, mode: "Webhook", webhook: true},
		{name: "cluster, file silent", args: []string{"--kubeconfig", kubeconfig, "--config", silent}, mode: "Webhook", webhook: true},
		{name: "cluster, file chooses groups", args: []string{"--kubeconfig", kubeconfig, "--config", groups}, mode: "NodeletGroups",
			insecure: true, insecureOf: "every client certificate of the client CA"},
		{name: "cluster, flags choose groups", args: []string{"--kubeconfig", kubeconfig, "--authorization-mode", "NodeletGroups"},
			mode: "NodeletGroups", webhook: true, insecure: true, insecureOf: "every service-account token of the cluster (pods' own included)"},
		{name: "cluster, flag over file", args: []string{"--kubeconfig", kubeconfig, "--config", groups, "--authorization-mode", "Webhook",
			"--authentication-token-webhook"}, mode: "Webhook", webhook: true},
		{name: "cluster, webhook authn off by flag", args: []string{"--kubeconfig", kubeconfig, "--authentication-token-webhook=false"},
			mode: "Webhook"},
		{name: "cluster, always allow", args: []string{"--kubeconfig", kubeconfig, "--authorization-mode", "AlwaysAllow"},
			mode: "AlwaysAllow", webhook: true, insecure: true, insecureOf: "may do anything on this node's API"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, _, err := configFrom(t, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			a := cfg.SecureAuth()
			if a.AuthorizationMode != tc.mode || cfg.TokenWebhook() != tc.webhook || a.AnonymousAuth != tc.anonymous {
				t.Errorf("mode %s, token webhook %v, anonymous %v; want %s, %v, %v",
					a.AuthorizationMode, cfg.TokenWebhook(), a.AnonymousAuth, tc.mode, tc.webhook, tc.anonymous)
			}
			if err := server.CheckAuthorization(a.AuthorizationMode, a.AnonymousAuth); err != nil {
				t.Errorf("CheckAuthorization: %v", err)
			}
			msg := server.ClusterAuthorizationWarning(a, cfg.TokenWebhook())
			if !cfg.ClusterMode() {
				return
			}
			if (msg != "") != tc.insecure || !strings.Contains(msg, tc.insecureOf) {
				t.Errorf("warning %q, want one (%v) saying %q", msg, tc.insecure, tc.insecureOf)
			}
		})
	}
}

// --runtime-handler, repeated, defines the managed containerd's handlers
// beside runc; a bad one is refused naming the flag, and so is one given
// for a runtime nodelet does not manage.
func TestRuntimeHandlerFlag(t *testing.T) {
	cfg, _, err := configFrom(t, "--runtime-handler", "name=runc-e2e,binary=/usr/sbin/runc", "--runtime-handler", "name=gvisor,type=io.containerd.runsc.v1")
	if err != nil {
		t.Fatal(err)
	}
	want := []containerd.Handler{{Name: "runc-e2e", BinaryName: "/usr/sbin/runc"}, {Name: "gvisor", RuntimeType: "io.containerd.runsc.v1"}}
	if !slices.Equal(cfg.Managed.Containerd.Handlers, want) {
		t.Errorf("handlers %+v, want %+v", cfg.Managed.Containerd.Handlers, want)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
	if _, _, err := configFrom(t, "--runtime-handler", "name=Bad"); err == nil || !strings.Contains(err.Error(), "--runtime-handler: runtime handler \"Bad\"") {
		t.Errorf("bad name: %v", err)
	}
	cfg, _, err = configFrom(t, "--runtime-handler", "name=crun", "--container-runtime-endpoint", "unix:///run/containerd/containerd.sock")
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "define them in that runtime's configuration") {
		t.Errorf("with an endpoint: Validate %v", err)
	}
}

func TestGCTargetLeavesTheUsersGOGC(t *testing.T) {
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "GOGC" {
				return v
			}
			return ""
		}
	}
	if p, ok := gcTarget(env("")); !ok || p != gcPercent {
		t.Errorf("GOGC unset: got %d, %v; want %d, true", p, ok, gcPercent)
	}
	for _, v := range []string{"100", "off", "200"} {
		if p, ok := gcTarget(env(v)); ok {
			t.Errorf("GOGC=%s: set %d, want the user's", v, p)
		}
	}
}
