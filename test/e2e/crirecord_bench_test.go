//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// criRecorder sits between an agent and containerd when
// NODELET_BENCH_TRACE is set: it passes every CRI call through unchanged and
// records when each began and ended, and for the calls that name a pod
// (sandbox run and status, container create, start and status) which pod.
// It shows where an agent's time goes between a manifest written and its
// container running, for the kubelet and nodelet alike, and costs both the
// same (one more hop on loopback per call).
type criRecorder struct {
	socket string
	server *grpc.Server
	conn   *grpc.ClientConn

	mu         sync.Mutex
	calls      []criCall
	sandboxPod map[string]string // sandbox ID → pod name
	podOfCtr   map[string]string // container ID → pod name
	podOfUID   map[string]string // pod UID → pod name
	// lastRun and lastCreate are the latest RunPodSandbox and
	// CreateContainer requests, as sent (captureFloorRequests).
	lastRun, lastCreate []byte
}

type criCall struct {
	method     string // short: "RunPodSandbox"
	pod        string // "" when the call names no one pod
	uid        string // the pod UID a list call filtered on, resolved by resolve
	start, end time.Time
}

// rawFrame is a gRPC message passed on undecoded.
type rawFrame struct{ data []byte }

type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.(*rawFrame).data)}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	v.(*rawFrame).data = data.Materialize()
	return nil
}

var protoCodec = encoding.GetCodecV2("proto")

func decode(data []byte, msg any) bool {
	return protoCodec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(data)}, msg) == nil
}

// startCRIRecorder listens on a socket under the scratch directory and
// forwards to the shared containerd; it stops when the benchmark ends.
func startCRIRecorder(b *testing.B, name string) *criRecorder {
	b.Helper()
	r := &criRecorder{socket: filepath.Join(shared.work, "cri-"+name+".sock"),
		sandboxPod: map[string]string{}, podOfCtr: map[string]string{}, podOfUID: map[string]string{}}
	os.Remove(r.socket)
	ln, err := net.Listen("unix", r.socket)
	if err != nil {
		b.Fatal(err)
	}
	r.conn, err = grpc.NewClient(shared.endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{}), grpc.MaxCallRecvMsgSize(16<<20)))
	if err != nil {
		b.Fatal(err)
	}
	r.server = grpc.NewServer(grpc.ForceServerCodecV2(rawCodec{}), grpc.UnknownServiceHandler(r.forward),
		grpc.MaxRecvMsgSize(16<<20))
	go r.server.Serve(ln)
	b.Cleanup(func() { r.server.Stop(); r.conn.Close() })
	return r
}

func (r *criRecorder) endpoint() string { return "unix://" + r.socket }

// forward passes one call (unary or streaming) to containerd and back.
func (r *criRecorder) forward(_ any, in grpc.ServerStream) error {
	method, _ := grpc.MethodFromServerStream(in)
	start := time.Now()
	ctx, cancel := context.WithCancel(in.Context())
	defer cancel()
	out, err := r.conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method)
	if err != nil {
		return err
	}
	var req, resp []byte
	upErr := make(chan error, 1)
	go func() {
		for {
			f := &rawFrame{}
			if err := in.RecvMsg(f); err != nil {
				if errors.Is(err, io.EOF) {
					upErr <- out.CloseSend()
				} else {
					upErr <- err
				}
				return
			}
			if req == nil {
				req = f.data
			}
			if err := out.SendMsg(f); err != nil {
				upErr <- err
				return
			}
		}
	}()
	first := true
	for {
		f := &rawFrame{}
		err := out.RecvMsg(f)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			<-upErr
			r.record(method, start, req, nil)
			return err
		}
		if first {
			if md, err := out.Header(); err == nil {
				in.SendHeader(md)
			}
			first = false
			resp = f.data
		}
		if err := in.SendMsg(f); err != nil {
			return err
		}
	}
	in.SetTrailer(out.Trailer())
	if err := <-upErr; err != nil {
		return err
	}
	r.record(method, start, req, resp)
	return nil
}

// record notes a finished call and, from its request and response, the
// pod it was for.
func (r *criRecorder) record(method string, start time.Time, req, resp []byte) {
	end := time.Now()
	short := method[strings.LastIndex(method, "/")+1:]
	r.mu.Lock()
	defer r.mu.Unlock()
	var pod, uid string
	switch short {
	case "ListPodSandbox":
		var q runtimeapi.ListPodSandboxRequest
		if decode(req, &q) {
			uid = q.GetFilter().GetLabelSelector()[podUIDLabel]
		}
	case "ListContainers":
		var q runtimeapi.ListContainersRequest
		if decode(req, &q) {
			uid = q.GetFilter().GetLabelSelector()[podUIDLabel]
		}
	case "RunPodSandbox":
		var q runtimeapi.RunPodSandboxRequest
		var p runtimeapi.RunPodSandboxResponse
		r.lastRun = req
		if decode(req, &q) {
			pod = q.GetConfig().GetMetadata().GetName()
			r.podOfUID[q.GetConfig().GetMetadata().GetUid()] = pod
			if resp != nil && decode(resp, &p) {
				r.sandboxPod[p.PodSandboxId] = pod
			}
		}
	case "CreateContainer":
		var q runtimeapi.CreateContainerRequest
		var p runtimeapi.CreateContainerResponse
		r.lastCreate = req
		if decode(req, &q) {
			pod = r.sandboxPod[q.PodSandboxId]
			if resp != nil && decode(resp, &p) {
				r.podOfCtr[p.ContainerId] = pod
			}
		}
	case "StartContainer":
		var q runtimeapi.StartContainerRequest
		if decode(req, &q) {
			pod = r.podOfCtr[q.ContainerId]
		}
	case "ContainerStatus":
		var q runtimeapi.ContainerStatusRequest
		if decode(req, &q) {
			pod = r.podOfCtr[q.ContainerId]
		}
	case "PodSandboxStatus", "StopPodSandbox", "RemovePodSandbox":
		var q runtimeapi.PodSandboxStatusRequest // the same field 1 in all three
		if decode(req, &q) {
			pod = r.sandboxPod[q.PodSandboxId]
		}
	}
	r.calls = append(r.calls, criCall{method: short, pod: pod, uid: uid, start: start, end: end})
}

const podUIDLabel = "io.kubernetes.pod.uid"

// lastRequests decodes the latest RunPodSandbox and CreateContainer
// requests that passed.
func (r *criRecorder) lastRequests() (*runtimeapi.RunPodSandboxRequest, *runtimeapi.CreateContainerRequest, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	run, create := &runtimeapi.RunPodSandboxRequest{}, &runtimeapi.CreateContainerRequest{}
	if r.lastRun == nil || r.lastCreate == nil || !decode(r.lastRun, run) || !decode(r.lastCreate, create) {
		return nil, nil, errors.New("no RunPodSandbox and CreateContainer request recorded")
	}
	return run, create, nil
}

// since returns the calls that began at or after t.
func (r *criRecorder) since(t time.Time) []criCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []criCall
	for _, c := range r.calls {
		if !c.start.Before(t) {
			if c.uid != "" { // a list for one pod, maybe before its sandbox was asked for
				c.pod = r.podOfUID[c.uid]
			}
			out = append(out, c)
		}
	}
	return out
}

// traceSummary is where one batch's time went, from the calls an agent
// made after its manifests were written at t0 for pods named prefix*.
type traceSummary struct {
	pods int
	// per pod, from t0: the first call naming the pod, RunPodSandbox sent
	// and returned, CreateContainer sent and returned, StartContainer sent
	// and returned
	firstCall, runSent, runDone, createSent, createDone, startSent, startDone []time.Duration
	running                                                                   time.Duration // all seen running
	maxRunInFlight                                                            int
	callsByMethod                                                             map[string]int
	// sequence is the calls for one pod of the batch (the one whose
	// RunPodSandbox was sent last), in order: "+ms Method (ms)".
	sequence []string
}

// inPathCalls is how long a single pod's RunPodSandbox, CreateContainer
// and StartContainer took together until it was seen running (the
// container may show running before StartContainer returns); false for a
// batch.
func (s traceSummary) inPathCalls() (time.Duration, bool) {
	if s.pods != 1 || len(s.runDone) != 1 || len(s.createDone) != 1 || len(s.startDone) != 1 {
		return 0, false
	}
	return s.runDone[0] - s.runSent[0] + s.createDone[0] - s.createSent[0] + min(s.startDone[0], s.running) - s.startSent[0], true
}

func summarizeTrace(calls []criCall, t0 time.Time, prefix string, running time.Duration) traceSummary {
	s := traceSummary{callsByMethod: map[string]int{}, running: running}
	sort.Slice(calls, func(i, j int) bool { return calls[i].start.Before(calls[j].start) })
	type podTimes struct{ first, runS, runE, crS, crE, stS, stE time.Time }
	pods := map[string]*podTimes{}
	at := func(name string) *podTimes {
		p := pods[name]
		if p == nil {
			p = &podTimes{}
			pods[name] = p
		}
		return p
	}
	type edge struct {
		t     time.Time
		delta int
	}
	var runs []edge
	for _, c := range calls {
		s.callsByMethod[c.method]++
		if !strings.HasPrefix(c.pod, prefix) {
			continue
		}
		p := at(c.pod)
		if p.first.IsZero() || c.start.Before(p.first) {
			p.first = c.start
		}
		switch c.method {
		case "RunPodSandbox":
			p.runS, p.runE = c.start, c.end
			runs = append(runs, edge{c.start, 1}, edge{c.end, -1})
		case "CreateContainer":
			p.crS, p.crE = c.start, c.end
		case "StartContainer":
			p.stS, p.stE = c.start, c.end
		}
	}
	var last string
	var lastRun time.Time
	for name, p := range pods {
		if p.runS.After(lastRun) {
			last, lastRun = name, p.runS
		}
	}
	for _, c := range calls {
		if c.pod == last && last != "" {
			s.sequence = append(s.sequence, fmt.Sprintf("+%.1f %s (%.1f)", float64(c.start.Sub(t0))/1e6, c.method, float64(c.end.Sub(c.start))/1e6))
		}
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i].t.Before(runs[j].t) })
	inFlight := 0
	for _, e := range runs {
		inFlight += e.delta
		s.maxRunInFlight = max(s.maxRunInFlight, inFlight)
	}
	s.pods = len(pods)
	since := func(list *[]time.Duration, t time.Time) {
		if !t.IsZero() { // a call not made (or not returned) before all ran
			*list = append(*list, t.Sub(t0))
		}
	}
	for _, p := range pods {
		since(&s.firstCall, p.first)
		since(&s.runSent, p.runS)
		since(&s.runDone, p.runE)
		since(&s.createSent, p.crS)
		since(&s.createDone, p.crE)
		since(&s.startSent, p.stS)
		since(&s.startDone, p.stE)
	}
	return s
}

// printTrace prints, per agent, the milestones of its pods (min, median,
// max over pods and rounds, from the manifests written) and its calls per
// pod by method.
func printTrace(w io.Writer, title string, agents []string, sums [][]traceSummary) {
	fmt.Fprintf(w, "%s: CRI call milestones after the manifests were written (min / median / max over pods)\n", title)
	type milestone struct {
		name string
		get  func(traceSummary) []time.Duration
	}
	milestones := []milestone{
		{"first call for the pod", func(s traceSummary) []time.Duration { return s.firstCall }},
		{"RunPodSandbox sent", func(s traceSummary) []time.Duration { return s.runSent }},
		{"RunPodSandbox returned", func(s traceSummary) []time.Duration { return s.runDone }},
		{"CreateContainer sent", func(s traceSummary) []time.Duration { return s.createSent }},
		{"CreateContainer returned", func(s traceSummary) []time.Duration { return s.createDone }},
		{"StartContainer sent", func(s traceSummary) []time.Duration { return s.startSent }},
		{"StartContainer returned", func(s traceSummary) []time.Duration { return s.startDone }},
		{"all seen running", func(s traceSummary) []time.Duration { return []time.Duration{s.running} }},
		// A single pod's start, split: the runtime's time in the three
		// calls on its path, and what is left, the agent's own time
		// before, between and after them (the floor's is the
		// benchmark's: a manifest is not read, the calls go back to back).
		{"  in the three calls", func(s traceSummary) []time.Duration {
			if in, ok := s.inPathCalls(); ok {
				return []time.Duration{in}
			}
			return nil
		}},
		{"  outside them", func(s traceSummary) []time.Duration {
			if in, ok := s.inPathCalls(); ok {
				return []time.Duration{s.running - in}
			}
			return nil
		}},
	}
	ms := func(d time.Duration) string { return fmt.Sprintf("%.0f", float64(d)/1e6) }
	fmt.Fprintf(w, "  %-26s", "ms after write")
	for _, a := range agents {
		fmt.Fprintf(w, " %22s", a)
	}
	fmt.Fprintln(w)
	for _, m := range milestones {
		fmt.Fprintf(w, "  %-26s", m.name)
		for i := range agents {
			var all []time.Duration
			for _, s := range sums[i] {
				all = append(all, m.get(s)...)
			}
			if len(all) == 0 {
				fmt.Fprintf(w, " %22s", "-")
				continue
			}
			sort.Slice(all, func(a, b int) bool { return all[a] < all[b] })
			fmt.Fprintf(w, " %22s", ms(all[0])+" / "+ms(all[len(all)/2])+" / "+ms(all[len(all)-1]))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "  %-26s", "RunPodSandbox in flight")
	for i := range agents {
		most := 0
		for _, s := range sums[i] {
			most = max(most, s.maxRunInFlight)
		}
		fmt.Fprintf(w, " %22s", fmt.Sprintf("at most %d", most))
	}
	fmt.Fprintln(w)
	methods := map[string]bool{}
	for i := range agents {
		for _, s := range sums[i] {
			for m := range s.callsByMethod {
				methods[m] = true
			}
		}
	}
	var sorted []string
	for m := range methods {
		sorted = append(sorted, m)
	}
	sort.Strings(sorted)
	for i, a := range agents {
		if len(sums[i]) > 0 {
			s := sums[i][len(sums[i])/2]
			fmt.Fprintf(w, "  %s, the calls for its last pod (ms after write, duration ms): %s\n", a, strings.Join(s.sequence, ", "))
		}
	}
	fmt.Fprintf(w, "  calls per pod until all ran (recorded at the socket):\n")
	for _, m := range sorted {
		fmt.Fprintf(w, "    %-24s", m)
		for i := range agents {
			calls, pods := 0, 0
			for _, s := range sums[i] {
				calls += s.callsByMethod[m]
				pods += s.pods
			}
			fmt.Fprintf(w, " %22.2f", float64(calls)/float64(max(pods, 1)))
		}
		fmt.Fprintln(w)
	}
}
