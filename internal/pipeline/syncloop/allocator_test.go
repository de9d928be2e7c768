package syncloop

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/internal/pipeline/pleg"
	"github.com/nodelet/nodelet/internal/pipeline/podconfig"
	"github.com/nodelet/nodelet/internal/pipeline/podworker"
	"github.com/nodelet/nodelet/internal/pure/podupdate"
	"github.com/nodelet/nodelet/internal/pure/resize"
)

// fakeAllocator allocates CPU requests by pod UID and accepts every resize
// up to limit (milliCPU), recording what it is asked.
type fakeAllocator struct {
	cpu      map[types.UID]string
	limit    int64
	calls    []string
	deferred []types.UID
}

func (f *fakeAllocator) Admitted(pod *v1.Pod) {
	f.calls = append(f.calls, "admitted "+pod.Name+" "+cpuOf(pod))
	if _, ok := f.cpu[pod.UID]; !ok {
		f.cpu[pod.UID] = cpuOf(pod)
	}
}

func (f *fakeAllocator) Allocated(pod *v1.Pod) *v1.Pod {
	cpu, ok := f.cpu[pod.UID]
	if !ok {
		return pod
	}
	return withCPU(pod, cpu)
}

func (f *fakeAllocator) Deferred() []types.UID { return f.deferred }

func (f *fakeAllocator) Resize(pod *v1.Pod, others []*v1.Pod, node resize.Node, trigger string) (*v1.Pod, error) {
	var names []string
	for _, o := range others {
		names = append(names, o.Name)
	}
	f.calls = append(f.calls, "resize "+pod.Name+" "+cpuOf(pod)+" others="+strings.Join(names, ",")+
		" maxPods="+resource.NewQuantity(int64(node.Admission.MaxPods), resource.DecimalSI).String()+" "+trigger)
	q := pod.Spec.Containers[0].Resources.Requests[v1.ResourceCPU]
	if q.MilliValue() <= f.limit {
		f.cpu[pod.UID] = cpuOf(pod)
	}
	return f.Allocated(pod), nil
}

func cpuOf(pod *v1.Pod) string {
	q := pod.Spec.Containers[0].Resources.Requests[v1.ResourceCPU]
	return q.String()
}

func withCPU(p *v1.Pod, cpu string) *v1.Pod {
	p = p.DeepCopy()
	p.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu)}
	return p
}

// cpuWorkers records what the pod workers are given, with the CPU.
type cpuWorkers struct{ calls []string }

func (w *cpuWorkers) UpdatePod(u podworker.UpdatePodOptions) {
	w.calls = append(w.calls, u.Reason.String()+" "+u.Pod.Name+" "+cpuOf(u.Pod))
}
func (w *cpuWorkers) IsPodActive(types.UID) bool { return true }

func TestAllocatorShapesWhatWorkersGet(t *testing.T) {
	h := newHarness(10)
	h.loop.opts.Node.Allocatable = v1.ResourceList{v1.ResourceCPU: resource.MustParse("1")}
	workers := &cpuWorkers{}
	h.loop.deps.Workers = workers
	// A restarted nodelet: a was allocated 400m before; its source now
	// asks 900m, which would not fit beside b's 500m.
	alloc := &fakeAllocator{cpu: map[types.UID]string{"uid-a": "400m"}, limit: 600}
	h.loop.deps.Allocations = alloc

	a, b := withCPU(pod("a"), "900m"), withCPU(pod("b"), "500m")
	h.step(t, func() { h.config <- podconfig.PodUpdate{Op: podupdate.Add, Pods: []*v1.Pod{b, a}} })
	h.step(t, func() { h.pleg <- pleg.Event{PodUID: "uid-a", Type: pleg.ContainerDied} })
	// a asks for 600m: accepted.
	h.step(t, func() {
		h.config <- podconfig.PodUpdate{Op: podupdate.Update, Pods: []*v1.Pod{withCPU(pod("a"), "600m")}}
	})
	// then 800m: not accepted; the workers keep getting 600m.
	h.step(t, func() {
		h.config <- podconfig.PodUpdate{Op: podupdate.Update, Pods: []*v1.Pod{withCPU(pod("a"), "800m")}}
	})
	h.step(t, func() { h.pleg <- pleg.Event{PodUID: "uid-a", Type: pleg.ContainerDied} })

	wantWorkers := "ADD b 500m\nADD a 400m\nEVENT a 400m\nUPDATE a 600m\nUPDATE a 600m\nEVENT a 600m"
	if got := strings.Join(workers.calls, "\n"); got != wantWorkers {
		t.Errorf("workers got:\n%s\nwant:\n%s", got, wantWorkers)
	}
	// After the restart a's source still asks 900m: decided, not
	// accepted (the fake accepts up to 600m).
	wantAlloc := "admitted b 500m\nresize b 500m others= maxPods=10 pod_updated\nadmitted a 400m\nresize a 900m others=b maxPods=10 pod_updated\n" +
		"resize a 600m others=b maxPods=10 pod_updated\nresize a 800m others=b maxPods=10 pod_updated"
	if got := strings.Join(alloc.calls, "\n"); got != wantAlloc {
		t.Errorf("allocator asked:\n%s\nwant:\n%s", got, wantAlloc)
	}
}

// A deferred resize is decided again at each housekeeping round, as the
// kubelet's RetryPendingResizes: after a pod was removed with
// pods_removed, else periodic_retry; once accepted the worker gets the
// new allocation.
func TestDeferredResizesRetried(t *testing.T) {
	h := newHarness(10)
	workers := &cpuWorkers{}
	h.loop.deps.Workers = workers
	alloc := &fakeAllocator{cpu: map[types.UID]string{}, limit: 600}
	h.loop.deps.Allocations = alloc
	a, b := withCPU(pod("a"), "500m"), withCPU(pod("b"), "500m")
	h.step(t, func() { h.config <- podconfig.PodUpdate{Op: podupdate.Add, Pods: []*v1.Pod{a, b}} })
	h.step(t, func() {
		h.config <- podconfig.PodUpdate{Op: podupdate.Update, Pods: []*v1.Pod{withCPU(pod("a"), "800m")}}
	})
	alloc.deferred = []types.UID{"uid-a"}
	h.step(t, func() { h.hk <- time.Time{} }) // still does not fit
	alloc.limit = 1000
	h.step(t, func() { h.config <- podconfig.PodUpdate{Op: podupdate.Delete, Pods: []*v1.Pod{b}} })
	h.step(t, func() { h.hk <- time.Time{} })
	alloc.deferred = nil
	h.step(t, func() { h.hk <- time.Time{} })

	wantAlloc := strings.Join([]string{
		"admitted a 500m", "resize a 500m others= maxPods=10 pod_updated", "admitted b 500m", "resize b 500m others=a maxPods=10 pod_updated",
		"resize a 800m others=b maxPods=10 pod_updated",
		"resize a 800m others=b maxPods=10 periodic_retry",
		"resize a 800m others= maxPods=10 pods_removed",
	}, "\n")
	if got := strings.Join(alloc.calls, "\n"); got != wantAlloc {
		t.Errorf("allocator asked:\n%s\nwant:\n%s", got, wantAlloc)
	}
	// The retry that still defers syncs nothing.
	wantWorkers := "ADD a 500m\nADD b 500m\nUPDATE a 500m\nDELETE b 500m\nUPDATE a 800m"
	if got := strings.Join(workers.calls, "\n"); got != wantWorkers {
		t.Errorf("workers got:\n%s\nwant:\n%s", got, wantWorkers)
	}
}
