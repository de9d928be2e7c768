package nodeconfig

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/internal/serve/server"
)

// /configz serves the settings by the kubelet's names, and no secret a
// user can give nodelet: not the environment (the managed containerd's,
// which is nodelet's own), not the manifest URL's credentials or query,
// not the manifest URL's header values.
func TestConfigzHasNoSecrets(t *testing.T) {
	cfg := DefaultConfig("/var/lib/nodelet")
	cfg.NodeName = "node-a"
	cfg.PodManifestPath = "/etc/nodelet/manifests"
	cfg.ManifestURL = "https://urluser:urlpass@manifests.example/node-a.yaml?sig=querysecret"
	cfg.ManifestURLHeader = map[string][]string{"Authorization": {"Bearer hdrsecret"}, "X-Api-Key": {"hdrsecret2"}}
	cfg.Managed.Containerd.Env = []string{"AWS_SECRET_ACCESS_KEY=envsecret", "PATH=/usr/bin"}
	cfg.ContainerLogMonitorInterval = 10 * time.Second
	h, err := server.NewSecure(server.Config{
		AuthorizationMode: server.AuthorizationNodeletGroups, NodeName: cfg.NodeName,
		Tokens: map[string]server.UserInfo{"admin": {Name: "root", Groups: []string{server.AdminGroup}}},
	}, server.Deps{Configz: Configz(cfg)})
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest("GET", "/configz", nil)
	req.Header.Set("Authorization", "Bearer admin")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	body, _ := io.ReadAll(rec.Result().Body)
	if rec.Code != http.StatusOK {
		t.Fatalf("/configz: %d %s", rec.Code, body)
	}
	for _, secret := range []string{"envsecret", "AWS_SECRET", "urluser", "urlpass", "querysecret", "hdrsecret", "hdrsecret2"} {
		if strings.Contains(string(body), secret) {
			t.Errorf("/configz shows %q:\n%s", secret, body)
		}
	}
	var got struct {
		KC map[string]any `json:"kubeletconfig"`
	}
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]any{
		"kind": "KubeletConfiguration", "apiVersion": "kubelet.config.k8s.io/v1beta1",
		"staticPodPath": "/etc/nodelet/manifests", "staticPodURL": "https://REDACTED:REDACTED@manifests.example/node-a.yaml?sig=REDACTED",
		"syncFrequency": "1m0s", "fileCheckFrequency": "20s", "httpCheckFrequency": "20s",
		"address": "0.0.0.0", "port": 10250.0, "healthzPort": 10248.0, "healthzBindAddress": "127.0.0.1",
		"maxPods": 110.0, "podCIDR": cfg.Managed.Containerd.PodCIDR, "containerLogMaxSize": "10Mi", "containerLogMaxFiles": 5.0,
		"containerLogMonitorInterval": "10s", "containerRuntimeEndpoint": "unix:///var/lib/nodelet/containerd/containerd.sock",
		"podLogsDir": "/var/log/pods", "cgroupRoot": "/", "cgroupsPerQOS": true, "cgroupDriver": "cgroupfs",
	} {
		if got.KC[name] != want {
			t.Errorf("%s = %v, want %v", name, got.KC[name], want)
		}
	}
	if authz, _ := got.KC["authorization"].(map[string]any); authz["mode"] != "NodeletGroups" {
		t.Errorf("authorization = %v", got.KC["authorization"])
	}
	if hdr, _ := got.KC["staticPodURLHeader"].(map[string]any); len(hdr) != 2 {
		t.Errorf("staticPodURLHeader = %v", got.KC["staticPodURLHeader"])
	}
}

// /configz shows cluster mode's settings by their KubeletConfiguration
// names; flags that are no KubeletConfiguration field (--kubeconfig,
// --bootstrap-kubeconfig, --cert-dir, --node-labels) are not shown.
func TestConfigzShowsClusterSettings(t *testing.T) {
	cfg := DefaultConfig("/var/lib/nodelet")
	cfg.Kubeconfig, cfg.BootstrapKubeconfig, cfg.CertDir = "/etc/kubernetes/kubelet.conf", "/etc/kubernetes/bootstrap-kubelet.conf", "/secret/pki"
	cfg.NodeLabels = map[string]string{"team": "infra"}
	cfg.RotateCertificates, cfg.ServerTLSBootstrap, cfg.RegisterNode = true, true, false
	cfg.RegisterWithTaints = []v1.Taint{{Key: "dedicated", Value: "edge", Effect: v1.TaintEffectNoSchedule}}
	cfg.SystemReserved = v1.ResourceList{v1.ResourceMemory: resource.MustParse("512Mi")}
	cfg.ClusterDomain, cfg.ClusterDNS = "cluster.local", []string{"10.96.0.10"}
	cfg.AuthenticationTokenWebhook = ptr.To(true)
	b, err := json.Marshal(Configz(cfg))
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"rotateCertificates": "true", "serverTLSBootstrap": "true", "registerNode": "false",
		"registerWithTaints": `[{"effect":"NoSchedule","key":"dedicated","value":"edge"}]`,
		"kubeAPIQPS":         "50", "kubeAPIBurst": "100", "contentType": `"application/vnd.kubernetes.protobuf"`,
		"nodeStatusUpdateFrequency": `"10s"`, "nodeStatusReportFrequency": `"5m0s"`, "nodeLeaseDurationSeconds": "40",
		"systemReserved": `{"memory":"512Mi"}`, "clusterDomain": `"cluster.local"`, "clusterDNS": `["10.96.0.10"]`,
		"evictionHard":                `{"imagefs.available":"15%","imagefs.inodesFree":"5%","memory.available":"100Mi","nodefs.available":"10%","nodefs.inodesFree":"5%"}`,
		"resolvConf":                  `"/etc/resolv.conf"`,
		"imageGCHighThresholdPercent": "85", "imageGCLowThresholdPercent": "80", "imageMinimumGCAge": `"2m0s"`, "imageMaximumGCAge": `"0s"`,
		"authentication": `{"anonymous":{"enabled":false},"webhook":{"cacheTTL":"2m0s","enabled":true},"x509":{}}`,
	} {
		v, _ := json.Marshal(got[name])
		if string(v) != want {
			t.Errorf("%s = %s, want %s", name, v, want)
		}
	}
	authz, _ := got["authorization"].(map[string]any)
	if v, _ := json.Marshal(authz["webhook"]); string(v) != `{"cacheAuthorizedTTL":"5m0s","cacheUnauthorizedTTL":"30s"}` {
		t.Errorf("authorization.webhook = %s", v)
	}
	if v, _ := json.Marshal(got["enableSystemLogHandler"]); string(v) != "true" {
		t.Errorf("enableSystemLogHandler = %s", v)
	}
	for _, secret := range []string{"/etc/kubernetes/kubelet.conf", "bootstrap-kubelet.conf", "/secret/pki", "infra"} {
		if strings.Contains(string(b), secret) {
			t.Errorf("/configz shows %q", secret)
		}
	}
}

func TestManifestHTTPHeader(t *testing.T) {
	cfg := Config{ManifestURLHeader: map[string][]string{"x-token": {"a", "b"}, "Accept": {"yaml"}}}
	h := cfg.ManifestHTTPHeader()
	if got := h.Values("X-Token"); len(got) != 2 || got[0] != "a" || got[1] != "b" || h.Get("accept") != "yaml" || len(h) != 2 {
		t.Errorf("ManifestHTTPHeader = %v, want canonical names with every value", h)
	}
}
