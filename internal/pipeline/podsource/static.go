package podsource

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/nodelet/nodelet/internal/pipeline/apivalidation"
	"github.com/nodelet/nodelet/internal/pure/podspec"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Source names: the config.source value of pods from the manifest path and
// from the manifest URL, and the Source of their Updates.
const (
	SourceFile = "file"
	SourceHTTP = "http"
)

// StaticPod gives a decoded manifest pod its identity on this node, as the
// kubelet does for static pods: the name gets "-<nodeName>", the namespace
// defaults to "default", the UID is a hash of the content, the node name and
// the source (so an edit makes a new pod), and spec.nodeName is this node.
// It also applies the core/v1 defaults nodelet relies on. pod is not
// modified; the result is a new object.
func StaticPod(pod *v1.Pod, nodeName, source string) (*v1.Pod, error) {
	p := pod.DeepCopy()
	ApplyDefaults(p)
	if p.Namespace == "" {
		p.Namespace = v1.NamespaceDefault
	}
	p.Name = p.Name + "-" + strings.ToLower(nodeName)
	p.Spec.NodeName = nodeName
	uid, err := staticUID(p, nodeName, source)
	if err != nil {
		return nil, err
	}
	p.UID = uid
	// After the UID, which hashes the pod as earlier nodelets did (an
	// upgrade restarts no static pod).
	defaultResources(p)
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[podspec.AnnotationConfigHash] = string(uid)
	p.Annotations[podspec.AnnotationConfigSource] = source
	return p, nil
}

// staticUID hashes the defaulted pod, the node and the source. JSON of a
// Go struct has a stable field order, and maps are sorted by encoding/json,
// so equal pods give equal UIDs.
func staticUID(p *v1.Pod, nodeName, source string) (types.UID, error) {
	data, err := json.Marshal(p)
	if err != nil {
		return "", fmt.Errorf("hash pod: %w", err)
	}
	h := sha256.New()
	h.Write(data)
	fmt.Fprintf(h, "host:%s\nsource:%s\n", nodeName, source)
	return types.UID(hex.EncodeToString(h.Sum(nil))[:32]), nil
}

// ApplyDefaults sets the core/v1 defaults for the fields nodelet reads.
func ApplyDefaults(p *v1.Pod) {
	s := &p.Spec
	if s.RestartPolicy == "" {
		s.RestartPolicy = v1.RestartPolicyAlways
	}
	if s.DNSPolicy == "" {
		s.DNSPolicy = v1.DNSClusterFirst
	}
	switch {
	case s.TerminationGracePeriodSeconds == nil:
		grace := int64(v1.DefaultTerminationGracePeriodSeconds)
		s.TerminationGracePeriodSeconds = &grace
	case *s.TerminationGracePeriodSeconds < 0:
		// The API server's default for a pod (not for a pod template):
		// a negative grace period is 1 second.
		grace := int64(1)
		s.TerminationGracePeriodSeconds = &grace
	}
	if s.SchedulerName == "" {
		s.SchedulerName = v1.DefaultSchedulerName
	}
	for i := range s.Volumes {
		// An image volume's pull policy, as a container image's (the
		// API server's SetDefaults_Volume).
		if img := s.Volumes[i].Image; img != nil && img.PullPolicy == "" {
			img.PullPolicy = DefaultPullPolicy(img.Reference)
		}
	}
	for i := range s.InitContainers {
		defaultContainer(&s.InitContainers[i])
	}
	for i := range s.Containers {
		defaultContainer(&s.Containers[i])
	}
}

// defaultResources sets the resources of p's containers and of p itself
// as the API server's v1 defaults leave them (and the kubelet's decoder,
// for a static pod): a limit without a request becomes the request, so a
// pod with limits alone is Guaranteed, with its CPUs and memory admitted
// and accounted. Only resources: they are no part of a container's
// fingerprint (plan.ContainerHash), where other defaults (probe periods,
// say) would change the fingerprints of running containers.
func defaultResources(p *v1.Pod) {
	d := p.DeepCopy()
	apivalidation.DefaultPod(d)
	p.Spec.Resources = d.Spec.Resources
	for i := range p.Spec.InitContainers {
		p.Spec.InitContainers[i].Resources = d.Spec.InitContainers[i].Resources
	}
	for i := range p.Spec.Containers {
		p.Spec.Containers[i].Resources = d.Spec.Containers[i].Resources
	}
}

func defaultContainer(c *v1.Container) {
	if c.ImagePullPolicy == "" {
		c.ImagePullPolicy = DefaultPullPolicy(c.Image)
	}
	if c.TerminationMessagePath == "" {
		c.TerminationMessagePath = v1.TerminationMessagePathDefault
	}
	if c.TerminationMessagePolicy == "" {
		c.TerminationMessagePolicy = v1.TerminationMessageReadFile
	}
	for i := range c.Ports {
		if c.Ports[i].Protocol == "" {
			c.Ports[i].Protocol = v1.ProtocolTCP
		}
	}
}

// DefaultPullPolicy is Always for ":latest" or an image without a tag (and
// without a digest), IfNotPresent otherwise.
func DefaultPullPolicy(image string) v1.PullPolicy {
	if strings.Contains(image, "@") {
		return v1.PullIfNotPresent
	}
	last := image[strings.LastIndex(image, "/")+1:]
	i := strings.LastIndex(last, ":")
	if i < 0 || last[i+1:] == "latest" {
		return v1.PullAlways
	}
	return v1.PullIfNotPresent
}
