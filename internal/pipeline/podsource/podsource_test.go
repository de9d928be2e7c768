package podsource

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodelet/nodelet/internal/pure/podspec"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

const goodPod = `apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  containers:
  - name: app
    image: busybox:1.35
`

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		pods     int
		err      string
	}{
		{"yaml", goodPod, 1, ""},
		{"json", `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"j"},"spec":{"containers":[{"name":"c","image":"i:1"}]}}`, 1, ""},
		{"multi-document", goodPod + "---\n" + strings.Replace(goodPod, "web", "two", 1), 2, ""},
		{"empty documents", "---\n" + goodPod + "---\n---\n", 1, ""},
		{"unknown field", strings.Replace(goodPod, "  name: web", "  name: web\n  nmae: x", 1), 0, `unknown field "nmae"`},
		{"duplicate field", strings.Replace(goodPod, "  name: web", "  name: web\n  name: web2", 1), 0, "already set"},
		{"other kind", "apiVersion: v1\nkind: Service\nmetadata: {name: s}\n", 0, `kind "Service"`},
		{"wrong apiVersion", strings.Replace(goodPod, "apiVersion: v1", "apiVersion: apps/v1", 1), 0, "not a Pod"},
		{"not yaml", "{{{", 0, "document 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pods, err := Decode([]byte(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.err)
				}
				return
			}
			if err != nil || len(pods) != tc.pods {
				t.Fatalf("got %d pods, err %v; want %d", len(pods), err, tc.pods)
			}
		})
	}
}

// A manifest gets the API server's verdict, with its field paths and
// words, on one line; what the API server accepts (and defaults) runs.
func TestValidateWithAPIServerRules(t *testing.T) {
	base := func() *v1.Pod {
		pods, err := Decode([]byte(goodPod))
		if err != nil {
			t.Fatal(err)
		}
		return pods[0]
	}
	for name, tc := range map[string]struct {
		mutate func(*v1.Pod)
		err    string
	}{
		"valid":              {func(*v1.Pod) {}, ""},
		"no name":            {func(p *v1.Pod) { p.Name = "" }, "a name is needed for the pod"},
		"bad name":           {func(p *v1.Pod) { p.Name = "Web_1" }, `metadata.name: Invalid value: "Web_1-node1": a lowercase RFC 1123 subdomain`},
		"bad namespace":      {func(p *v1.Pod) { p.Namespace = "a.b" }, `metadata.namespace: Invalid value: "a.b"`},
		"no containers":      {func(p *v1.Pod) { p.Spec.Containers = nil }, "spec.containers: Required value"},
		"duplicate names":    {func(p *v1.Pod) { p.Spec.InitContainers = []v1.Container{{Name: "app", Image: "x"}} }, `spec.initContainers[0].name: Duplicate value: "app"`},
		"empty image":        {func(p *v1.Pod) { p.Spec.Containers[0].Image = "" }, "spec.containers[0].image: Required value"},
		"bad restart policy": {func(p *v1.Pod) { p.Spec.RestartPolicy = "Sometimes" }, `spec.restartPolicy: Unsupported value: "Sometimes"`},
		"container port -5":  {func(p *v1.Pod) { p.Spec.Containers[0].Ports = []v1.ContainerPort{{ContainerPort: -5}} }, "spec.containers[0].ports[0].containerPort: Invalid value: -5: must be between 1 and 65535, inclusive"},
		"host port 99999":    {func(p *v1.Pod) { p.Spec.Containers[0].Ports = []v1.ContainerPort{{ContainerPort: 80, HostPort: 99999}} }, "spec.containers[0].ports[0].hostPort: Invalid value: 99999"},
		"protocol FOO":       {func(p *v1.Pod) { p.Spec.Containers[0].Ports = []v1.ContainerPort{{ContainerPort: 80, Protocol: "FOO"}} }, `spec.containers[0].ports[0].protocol: Unsupported value: "FOO"`},
		"env name A=B":       {func(p *v1.Pod) { p.Spec.Containers[0].Env = []v1.EnvVar{{Name: "A=B", Value: "x"}} }, `spec.containers[0].env[0].name: Invalid value: "A=B"`},
		"duplicate volumes":  {func(p *v1.Pod) { p.Spec.Volumes = []v1.Volume{emptyDir("v"), emptyDir("v")} }, `spec.volumes[1].name: Duplicate value: "v"`},
		"negative quantity": {func(p *v1.Pod) {
			p.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceCPU: resource.MustParse("-1")}
		}, "spec.containers[0].resources.requests[cpu]: Invalid value: \"-1\": must be greater than or equal to 0"},
		"negative grace": {func(p *v1.Pod) { p.Spec.TerminationGracePeriodSeconds = ptrTo(int64(-100)) }, ""},
		"relative mount path": {func(p *v1.Pod) {
			p.Spec.Volumes = []v1.Volume{emptyDir("v")}
			p.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "v", MountPath: "data"}}
		}, ""},
	} {
		t.Run(name, func(t *testing.T) {
			p := base()
			tc.mutate(p)
			data, err := json.Marshal(p)
			if err != nil {
				t.Fatal(err)
			}
			pods, class, err := parseManifests(data, false, &Objects{}, fileLimits, "node1", SourceFile, "/etc/manifests/web.yaml")
			if tc.err == "" {
				if err != nil || len(pods) != 1 {
					t.Fatalf("refused (%s): %v", class, err)
				}
				if g := pods[0].Spec.TerminationGracePeriodSeconds; g == nil || *g < 0 {
					t.Errorf("grace period %v runs as it was given", g)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) || class != ReasonValidate {
				t.Fatalf("error %v (%s), want %q (%s)", err, class, tc.err, ReasonValidate)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error spans lines: %q", err)
			}
		})
	}
}

func emptyDir(name string) v1.Volume {
	return v1.Volume{Name: name, VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}
}

func ptrTo[T any](v T) *T { return &v }

func TestStaticPodIdentity(t *testing.T) {
	pods, _ := Decode([]byte(goodPod))
	a, err := StaticPod(pods[0], "Node1", SourceFile)
	if err != nil {
		t.Fatal(err)
	}
	if a.Name != "web-node1" || a.Namespace != "default" || a.Spec.NodeName != "Node1" {
		t.Errorf("name/namespace/node = %s/%s/%s", a.Namespace, a.Name, a.Spec.NodeName)
	}
	if a.Annotations[podspec.AnnotationConfigHash] != string(a.UID) || a.Annotations[podspec.AnnotationConfigSource] != "file" || len(a.UID) != 32 {
		t.Errorf("annotations %v uid %q", a.Annotations, a.UID)
	}
	if pods[0].Name != "web" {
		t.Error("StaticPod modified its input")
	}
	same, _ := StaticPod(pods[0], "Node1", SourceFile)
	otherNode, _ := StaticPod(pods[0], "node2", SourceFile)
	edited := pods[0].DeepCopy()
	edited.Spec.Containers[0].Image = "busybox:1.36"
	changed, _ := StaticPod(edited, "Node1", SourceFile)
	if same.UID != a.UID {
		t.Error("same content gave a different UID")
	}
	if otherNode.UID == a.UID || changed.UID == a.UID {
		t.Error("UID does not depend on node name and content")
	}
	if got := a.Spec.Containers[0].ImagePullPolicy; got != v1.PullIfNotPresent {
		t.Errorf("pull policy %s", got)
	}
	if a.Spec.RestartPolicy != v1.RestartPolicyAlways || *a.Spec.TerminationGracePeriodSeconds != 30 {
		t.Error("defaults not applied")
	}
}

// A limit without a request becomes the request, as the API server and
// the kubelet's decoder default it: limits alone make a Guaranteed pod.
// The UID is the one the pod had before nodelet defaulted resources, so an
// upgrade restarts no static pod.
func TestStaticPodResourceDefaults(t *testing.T) {
	const limitsOnly = goodPod + `    resources:
      limits: {cpu: "1", memory: 32Mi}
      requests: {memory: 16Mi}
  initContainers:
  - name: init
    image: busybox:1.35
    resources:
      limits: {cpu: 500m}
`
	pods, err := Decode([]byte(limitsOnly))
	if err != nil {
		t.Fatal(err)
	}
	p, err := StaticPod(pods[0], "node1", SourceFile)
	if err != nil {
		t.Fatal(err)
	}
	req := p.Spec.Containers[0].Resources.Requests
	if req.Cpu().String() != "1" || req.Memory().String() != "16Mi" {
		t.Errorf("container requests %v, want cpu 1 (its limit) and memory 16Mi (its own)", req)
	}
	if got := p.Spec.InitContainers[0].Resources.Requests.Cpu().String(); got != "500m" {
		t.Errorf("init container cpu request %s, want its limit 500m", got)
	}
	undefaulted := pods[0].DeepCopy()
	ApplyDefaults(undefaulted)
	undefaulted.Namespace, undefaulted.Name, undefaulted.Spec.NodeName = v1.NamespaceDefault, "web-node1", "node1"
	if uid, _ := staticUID(undefaulted, "node1", SourceFile); uid != p.UID {
		t.Errorf("UID %s, want %s (the pod's hash before resource defaults)", p.UID, uid)
	}
}

func TestDefaultPullPolicy(t *testing.T) {
	for image, want := range map[string]v1.PullPolicy{
		"busybox":                      v1.PullAlways,
		"busybox:latest":               v1.PullAlways,
		"busybox:1.35":                 v1.PullIfNotPresent,
		"localhost:5000/app":           v1.PullAlways,
		"localhost:5000/app:v1":        v1.PullIfNotPresent,
		"busybox@sha256:abc":           v1.PullIfNotPresent,
		"registry.k8s.io/pause:3.10":   v1.PullIfNotPresent,
		"registry.k8s.io/pause:latest": v1.PullAlways,
	} {
		if got := DefaultPullPolicy(image); got != want {
			t.Errorf("DefaultPullPolicy(%q) = %s, want %s", image, got, want)
		}
	}
}

func TestReadPath(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("web.yaml", goodPod)
	write("two.yaml", strings.Replace(goodPod, "web", "db", 1))
	write("broken.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: b}\nspec: {containers: [{name: x}]}\n")
	write(".hidden.yaml", goodPod)
	write("web.yaml~", goodPod)
	write("web.yaml.swp", goodPod)
	write("x.tmp", goodPod)
	write("huge.yaml", goodPod+"\n#"+strings.Repeat("x", MaxManifestSize))
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	write("sub/nested.yaml", goodPod)

	snap, err := ReadPath(dir, "n")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range snap.Pods {
		names = append(names, p.Name)
	}
	if strings.Join(names, ",") != "db-n,web-n" {
		t.Errorf("pods = %v, want db-n,web-n", names)
	}
	if len(snap.Errors) != 2 {
		t.Fatalf("errors = %v, want broken.yaml and huge.yaml", snap.Errors)
	}
	for _, fe := range snap.Errors {
		base := filepath.Base(fe.Path)
		if base != "broken.yaml" && base != "huge.yaml" || !strings.Contains(fe.Error(), base) {
			t.Errorf("unexpected error %v", fe)
		}
	}

	single, err := ReadPath(filepath.Join(dir, "web.yaml"), "n")
	if err != nil || len(single.Pods) != 1 {
		t.Errorf("single file: %v %v", single, err)
	}
	if _, err := ReadPath(filepath.Join(dir, "missing"), "n"); err == nil {
		t.Error("missing path is not an error")
	}
}

// An image volume's pull policy defaults as a container image's, as the
// API server's SetDefaults_Volume; a policy given is kept.
func TestImageVolumePullPolicyDefault(t *testing.T) {
	pod := &v1.Pod{Spec: v1.PodSpec{Volumes: []v1.Volume{
		{Name: "latest", VolumeSource: v1.VolumeSource{Image: &v1.ImageVolumeSource{Reference: "example.com/data"}}},
		{Name: "tagged", VolumeSource: v1.VolumeSource{Image: &v1.ImageVolumeSource{Reference: "example.com/data:v1"}}},
		{Name: "given", VolumeSource: v1.VolumeSource{Image: &v1.ImageVolumeSource{Reference: "example.com/data", PullPolicy: v1.PullNever}}},
		{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
	}}}
	ApplyDefaults(pod)
	for i, want := range []v1.PullPolicy{v1.PullAlways, v1.PullIfNotPresent, v1.PullNever} {
		if got := pod.Spec.Volumes[i].Image.PullPolicy; got != want {
			t.Errorf("volume %s: pull policy %s, want %s", pod.Spec.Volumes[i].Name, got, want)
		}
	}
}
