package podresourcesapi

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
)

type pods []*v1.Pod

func (p pods) ActivePods() []*v1.Pod { return p }

type devices map[string][]*podresourcesapi.ContainerDevices // by uid/container

func (d devices) DevicesFor(uid, c string) []*podresourcesapi.ContainerDevices { return d[uid+"/"+c] }
func (d devices) AllocatableDevices() []*podresourcesapi.ContainerDevices {
	return []*podresourcesapi.ContainerDevices{{ResourceName: "example.com/r", DeviceIds: []string{"d0", "d1"}}}
}

type cpus map[string][]int64

func (c cpus) CPUsFor(uid, name string) []int64 { return c[uid+"/"+name] }
func (cpus) AllocatableCPUs() []int64           { return []int64{1, 2, 3} }

type dynamic struct{}

func (dynamic) DynamicResourcesFor(pod *v1.Pod, c *v1.Container) []*podresourcesapi.DynamicResource {
	return []*podresourcesapi.DynamicResource{{ClaimName: pod.Name + "-" + c.Name}}
}

func testPod() *v1.Pod {
	always := v1.ContainerRestartPolicyAlways
	pod := &v1.Pod{}
	pod.Name, pod.Namespace, pod.UID = "p", "ns", types.UID("uid-1")
	pod.Spec.InitContainers = []v1.Container{{Name: "init"}, {Name: "sidecar", RestartPolicy: &always}}
	pod.Spec.Containers = []v1.Container{{Name: "app"}}
	return pod
}

// serve runs a Server in a temporary directory and returns a client.
func serve(t *testing.T, deps Deps) (podresourcesapi.PodResourcesListerClient, string) {
	t.Helper()
	dir := t.TempDir()
	s := New(Options{Dir: dir}, deps)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, SocketName), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.WaitForReady(true)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return podresourcesapi.NewPodResourcesListerClient(conn), dir
}

func call(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // failsafe
	t.Cleanup(cancel)
	return ctx
}

// List and Get answer, over the socket, each app container and sidecar
// (not a plain init container) with what every provider says it holds.
func TestListAndGet(t *testing.T) {
	pod := testPod()
	reg := prometheus.NewRegistry()
	client, dir := serve(t, Deps{Pods: pods{pod}, Metrics: reg, Providers: Providers{
		Devices: devices{"uid-1/app": {{ResourceName: "example.com/r", DeviceIds: []string{"d1"},
			Topology: &podresourcesapi.TopologyInfo{Nodes: []*podresourcesapi.NUMANode{{ID: 0}}}}}},
		CPUs:    cpus{"uid-1/sidecar": {2}},
		Dynamic: dynamic{},
	}})
	want := &podresourcesapi.PodResources{Name: "p", Namespace: "ns", Containers: []*podresourcesapi.ContainerResources{
		{Name: "sidecar", CpuIds: []int64{2}, DynamicResources: []*podresourcesapi.DynamicResource{{ClaimName: "p-sidecar"}}},
		{Name: "app", Devices: []*podresourcesapi.ContainerDevices{{ResourceName: "example.com/r", DeviceIds: []string{"d1"},
			Topology: &podresourcesapi.TopologyInfo{Nodes: []*podresourcesapi.NUMANode{{ID: 0}}}}},
			DynamicResources: []*podresourcesapi.DynamicResource{{ClaimName: "p-app"}}},
	}}
	list, err := client.List(call(t), &podresourcesapi.ListPodResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.PodResources) != 1 || !proto.Equal(list.PodResources[0], want) {
		t.Errorf("List = %v\nwant %v", list.PodResources, want)
	}
	got, err := client.Get(call(t), &podresourcesapi.GetPodResourcesRequest{PodName: "p", PodNamespace: "ns"})
	if err != nil || !proto.Equal(got.PodResources, want) {
		t.Errorf("Get = %v, %v\nwant %v", got, err, want)
	}
	_, err = client.Get(call(t), &podresourcesapi.GetPodResourcesRequest{PodName: "p", PodNamespace: "other"})
	if err == nil || !strings.Contains(err.Error(), "pod p in namespace other not found") {
		t.Errorf("Get of a missing pod: %v", err)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP kubelet_pod_resources_endpoint_errors_get Number of requests to the PodResource Get endpoint which returned error. Broken down by server api version.
# TYPE kubelet_pod_resources_endpoint_errors_get counter
kubelet_pod_resources_endpoint_errors_get{server_api_version="v1"} 1
# HELP kubelet_pod_resources_endpoint_requests_get Number of requests to the PodResource Get endpoint. Broken down by server api version.
# TYPE kubelet_pod_resources_endpoint_requests_get counter
kubelet_pod_resources_endpoint_requests_get{server_api_version="v1"} 2
# HELP kubelet_pod_resources_endpoint_requests_total Cumulative number of requests to the PodResource endpoint. Broken down by server api version.
# TYPE kubelet_pod_resources_endpoint_requests_total counter
kubelet_pod_resources_endpoint_requests_total{server_api_version="v1"} 3
`), "kubelet_pod_resources_endpoint_errors_get", "kubelet_pod_resources_endpoint_requests_get", "kubelet_pod_resources_endpoint_requests_total"); err != nil {
		t.Error(err)
	}
	fi, err := os.Stat(filepath.Join(dir, SocketName))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket %v, %v: want mode 0600", fi, err)
	}
}

// GetAllocatableResources is every provider's; a missing provider gives
// nothing rather than failing.
func TestGetAllocatableResources(t *testing.T) {
	client, _ := serve(t, Deps{Pods: pods{}, Providers: Providers{Devices: devices{}, CPUs: cpus{}}})
	got, err := client.GetAllocatableResources(call(t), &podresourcesapi.AllocatableResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	want := &podresourcesapi.AllocatableResourcesResponse{
		Devices: []*podresourcesapi.ContainerDevices{{ResourceName: "example.com/r", DeviceIds: []string{"d0", "d1"}}},
		CpuIds:  []int64{1, 2, 3},
	}
	if !proto.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	client2, _ := serve(t, Deps{Pods: pods{testPod()}})
	if got, err := client2.GetAllocatableResources(call(t), &podresourcesapi.AllocatableResourcesRequest{}); err != nil || len(got.Devices)+len(got.CpuIds) != 0 {
		t.Errorf("without providers: %v, %v", got, err)
	}
	if got, err := client2.List(call(t), &podresourcesapi.ListPodResourcesRequest{}); err != nil || len(got.PodResources[0].Containers) != 2 {
		t.Errorf("List without providers: %v, %v", got, err)
	}
}
