package stats

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/nodelet/nodelet/internal/pipeline/cri"
	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// listed is what the runtime answered to one refresh.
type listed struct {
	sandboxes  []*runtimeapi.PodSandbox
	containers []*runtimeapi.Container
	// Exactly one of containerStats and sandboxStats was listed, as told
	// by fromSandboxStats.
	containerStats   []*runtimeapi.ContainerStats
	sandboxStats     []*runtimeapi.PodSandboxStats
	fromSandboxStats bool
	imageFs          *runtimeapi.ImageFsInfoResponse
	imageFsErr       error
}

// startLists makes the refresh's runtime calls in parallel; the returned
// function waits for them.
func (p *Provider) startLists(ctx context.Context, full bool) func() (*listed, error) {
	var (
		l                                    listed
		wg                                   sync.WaitGroup
		errSandboxes, errContainers, errStat error
	)
	wg.Go(func() {
		l.sandboxes, errSandboxes = p.rt.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{
			State:         &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY},
			LabelSelector: podspec.ManagedSelector(),
		})
	})
	wg.Go(func() {
		l.containers, errContainers = p.rt.ListContainers(ctx, &runtimeapi.ContainerFilter{
			State:         &runtimeapi.ContainerStateValue{State: runtimeapi.ContainerState_CONTAINER_RUNNING},
			LabelSelector: podspec.ManagedSelector(),
		})
	})
	wg.Go(func() { errStat = p.listStats(ctx, &l) })
	if full {
		wg.Go(func() { l.imageFs, l.imageFsErr = p.rt.ImageFsInfo(ctx) })
	}
	return func() (*listed, error) {
		wg.Wait()
		if err := errors.Join(errSandboxes, errContainers, errStat); err != nil {
			return nil, err
		}
		return &l, nil
	}
}

// listStats lists the sandbox stats when the runtime implements it, the
// container stats otherwise.
func (p *Provider) listStats(ctx context.Context, l *listed) error {
	p.mu.Lock()
	tryPods := p.sandboxStatsUnimplemented.IsZero() || p.clk.Since(p.sandboxStatsUnimplemented) >= sandboxStatsRetry
	p.mu.Unlock()
	if tryPods {
		s, err := p.rt.ListPodSandboxStats(ctx, &runtimeapi.PodSandboxStatsFilter{LabelSelector: podspec.ManagedSelector()})
		if err == nil {
			l.sandboxStats, l.fromSandboxStats = s, true
			return nil
		}
		if !cri.IsUnimplemented(err) {
			return err
		}
		p.mu.Lock()
		first := p.sandboxStatsUnimplemented.IsZero()
		p.sandboxStatsUnimplemented = p.clk.Now()
		p.mu.Unlock()
		if first {
			p.log.Info("runtime does not implement ListPodSandboxStats; pod CPU and memory are the sum of the containers'", "err", err)
		}
	}
	s, err := p.rt.ListContainerStats(ctx, &runtimeapi.ContainerStatsFilter{LabelSelector: podspec.ManagedSelector()})
	l.containerStats = s
	return err
}

// refresh builds a summary from scratch (but for the CPU samples and the
// disk usage cache).
func (p *Provider) refresh(ctx context.Context, full bool) (*v1alpha1.Summary, error) {
	return p.refreshWith(ctx, full, false)
}

// refreshWith is refresh; with freshDU, the directories' disk usage is
// measured now rather than served from the cache.
func (p *Provider) refreshWith(ctx context.Context, full, freshDU bool) (*v1alpha1.Summary, error) {
	wait := p.startLists(ctx, full)
	fsm := &fsMemo{machine: p.machine, byPath: map[string]*fsInfo{}, fresh: freshDU}
	now := p.clk.Now()
	node := p.nodeStats(now, full, fsm)
	l, err := wait()
	if err != nil {
		return nil, fmt.Errorf("stats summary: %w", err)
	}
	if full {
		node.Runtime = p.runtimeStats(l, now, fsm)
	}
	pods := p.podStats(l, now, full, fsm)
	p.cpu.forget(now)
	if full {
		p.du.forget(now)
	}
	return &v1alpha1.Summary{Node: node, Pods: pods}, nil
}

// refreshNode builds the node's stats alone, as a full refresh does but
// without the pods: the host's files, statfs, and one ImageFsInfo call
// for the runtime's filesystems. It cannot fail: what could not be read
// is left out, as in a full summary.
func (p *Provider) refreshNode(ctx context.Context) *v1alpha1.Summary {
	var l listed
	l.imageFs, l.imageFsErr = p.rt.ImageFsInfo(ctx)
	fsm := &fsMemo{machine: p.machine, byPath: map[string]*fsInfo{}}
	now := p.clk.Now()
	node := p.nodeStats(now, true, fsm)
	node.Runtime = p.runtimeStats(&l, now, fsm)
	return &v1alpha1.Summary{Node: node}
}

// processCounter is a Machine that counts the node's processes
// (HostMachine): the summary's rlimit, the pid.available signal.
type processCounter interface {
	Processes() (running, limit uint64, err error)
}

func (p *Provider) nodeStats(now time.Time, full bool, fsm *fsMemo) v1alpha1.NodeStats {
	n := v1alpha1.NodeStats{NodeName: p.nodeName}
	t := metav1.NewTime(now)
	if boot, err := p.machine.BootTime(); err != nil {
		p.log.Debug("stats: no node boot time", "err", err)
	} else {
		n.StartTime = metav1.NewTime(boot)
	}
	if usage, err := p.machine.NodeCPUUsage(); err != nil {
		p.log.Debug("stats: no node CPU usage", "err", err)
	} else {
		n.CPU = &v1alpha1.CPUStats{
			Time:                 t,
			UsageCoreNanoSeconds: &usage,
			UsageNanoCores:       p.cpu.nanoCores("node", now, now.UnixNano(), usage),
		}
	}
	if ws, usage, avail, rss, pf, mpf, err := p.machine.NodeMemory(); err != nil {
		p.log.Debug("stats: no node memory usage", "err", err)
	} else {
		n.Memory = &v1alpha1.MemoryStats{
			Time:            t,
			AvailableBytes:  &avail,
			UsageBytes:      &usage,
			WorkingSetBytes: &ws,
			RSSBytes:        &rss,
			PageFaults:      &pf,
			MajorPageFaults: &mpf,
		}
	}
	if pm, ok := p.machine.(processCounter); ok {
		if running, limit, err := pm.Processes(); err != nil {
			p.log.Debug("stats: no process count", "err", err)
		} else {
			maxPID, curProc := int64(limit), int64(running)
			n.Rlimit = &v1alpha1.RlimitStats{Time: t, MaxPID: &maxPID, NumOfRunningProcesses: &curProc}
		}
	}
	if full {
		if fi := fsm.get(p.rootDir); fi.err == nil {
			inodesUsed := fi.inodes - min(fi.inodes, fi.inodesFree)
			n.Fs = &v1alpha1.FsStats{
				Time:           t,
				AvailableBytes: &fi.available,
				CapacityBytes:  &fi.capacity,
				UsedBytes:      &fi.used,
				InodesFree:     &fi.inodesFree,
				Inodes:         &fi.inodes,
				InodesUsed:     &inodesUsed,
			}
		} else {
			p.log.Debug("stats: no root filesystem stats", "path", p.rootDir, "err", fi.err)
		}
	}
	return n
}

// runtimeStats is the image (and container) filesystem. The kubelet
// reports the first filesystem of each.
func (p *Provider) runtimeStats(l *listed, now time.Time, fsm *fsMemo) *v1alpha1.RuntimeStats {
	if l.imageFsErr != nil {
		p.log.Debug("stats: no image filesystem stats", "err", l.imageFsErr)
		return nil
	}
	images := l.imageFs.GetImageFilesystems()
	if len(images) == 0 {
		return nil
	}
	img := fsUsage(images[0], now, fsm)
	ctr := img
	if cs := l.imageFs.GetContainerFilesystems(); len(cs) > 0 {
		ctr = fsUsage(cs[0], now, fsm)
	}
	return &v1alpha1.RuntimeStats{ImageFs: img, ContainerFs: ctr}
}

// fsUsage is a runtime-reported filesystem usage, with the size of the
// filesystem when its mountpoint can be stat'ed.
func fsUsage(u *runtimeapi.FilesystemUsage, now time.Time, fsm *fsMemo) *v1alpha1.FsStats {
	out := &v1alpha1.FsStats{Time: nanoTime(u.GetTimestamp(), now)}
	if v := u.GetUsedBytes(); v != nil {
		out.UsedBytes = &v.Value
	}
	if v := u.GetInodesUsed(); v != nil {
		out.InodesUsed = &v.Value
	}
	if mp := u.GetFsId().GetMountpoint(); mp != "" {
		if fi := fsm.get(mp); fi.err == nil {
			out.AvailableBytes = &fi.available
			out.CapacityBytes = &fi.capacity
			out.Inodes = &fi.inodes
			out.InodesFree = &fi.inodesFree
		}
	}
	return out
}

// nanoTime is a runtime timestamp, or now when the runtime gave none.
func nanoTime(ns int64, now time.Time) metav1.Time {
	if ns == 0 {
		return metav1.NewTime(now)
	}
	return metav1.NewTime(time.Unix(0, ns))
}

// podBuild is a pod being assembled.
type podBuild struct {
	stats        v1alpha1.PodStats
	sandboxStats *runtimeapi.PodSandboxStats
}

func (p *Provider) podStats(l *listed, now time.Time, full bool, fsm *fsMemo) []v1alpha1.PodStats {
	pods := make(map[string]*podBuild, len(l.sandboxes))
	for _, sb := range l.sandboxes {
		if sb.GetState() != runtimeapi.PodSandboxState_SANDBOX_READY || !podspec.IsManaged(sb.GetLabels()) {
			continue
		}
		pods[sb.GetId()] = &podBuild{stats: v1alpha1.PodStats{
			PodRef:    podRef(sb),
			StartTime: metav1.NewTime(time.Unix(0, sb.GetCreatedAt())),
		}}
	}
	containers := make(map[string]*runtimeapi.Container, len(l.containers))
	for _, c := range l.containers {
		if c.GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING || !podspec.IsManaged(c.GetLabels()) || pods[c.GetPodSandboxId()] == nil {
			continue
		}
		containers[c.GetId()] = c
	}

	stats := l.containerStats
	if l.fromSandboxStats {
		stats = nil
		for _, ss := range l.sandboxStats {
			pb := pods[ss.GetAttributes().GetId()]
			if pb == nil {
				continue
			}
			pb.sandboxStats = ss
			stats = append(stats, ss.GetLinux().GetContainers()...)
		}
	}
	for _, cs := range stats {
		c := containers[cs.GetAttributes().GetId()]
		if c == nil {
			continue
		}
		delete(containers, c.GetId()) // once each
		pb := pods[c.GetPodSandboxId()]
		ctr := p.containerStats(cs, c, pb.stats.PodRef, now, full, fsm)
		pb.stats.Containers = append(pb.stats.Containers, ctr)
		addContainerToPod(&pb.stats, &ctr)
	}

	out := make([]v1alpha1.PodStats, 0, len(pods))
	for id, pb := range pods {
		ps := &pb.stats
		if lin := pb.sandboxStats.GetLinux(); lin != nil {
			if lin.GetCpu() != nil {
				ps.CPU = p.cpuStats("pod/"+id, lin.GetCpu(), now)
			}
			if lin.GetMemory() != nil {
				ps.Memory = memoryStats(lin.GetMemory(), now)
			}
			if full && lin.GetNetwork() != nil {
				ps.Network = networkStats(lin.GetNetwork(), now)
			}
		}
		if full {
			p.addStorageStats(ps, now, fsm)
		}
		slices.SortFunc(ps.Containers, func(a, b v1alpha1.ContainerStats) int { return cmp.Compare(a.Name, b.Name) })
		out = append(out, *ps)
	}
	slices.SortFunc(out, func(a, b v1alpha1.PodStats) int {
		return cmp.Or(
			cmp.Compare(a.PodRef.Namespace, b.PodRef.Namespace),
			cmp.Compare(a.PodRef.Name, b.PodRef.Name),
			cmp.Compare(a.PodRef.UID, b.PodRef.UID),
		)
	})
	return out
}

// podRef is the pod of a sandbox, from its labels (the metadata when a
// label is missing).
func podRef(sb *runtimeapi.PodSandbox) v1alpha1.PodReference {
	labels, md := sb.GetLabels(), sb.GetMetadata()
	return v1alpha1.PodReference{
		Name:      cmp.Or(labels[podspec.LabelPodName], md.GetName()),
		Namespace: cmp.Or(labels[podspec.LabelPodNamespace], md.GetNamespace()),
		UID:       cmp.Or(labels[podspec.LabelPodUID], md.GetUid()),
	}
}

func (p *Provider) containerStats(cs *runtimeapi.ContainerStats, c *runtimeapi.Container, pod v1alpha1.PodReference, now time.Time, full bool, fsm *fsMemo) v1alpha1.ContainerStats {
	name := cmp.Or(c.GetLabels()[podspec.LabelContainerName], c.GetMetadata().GetName())
	out := v1alpha1.ContainerStats{
		Name:      name,
		StartTime: metav1.NewTime(time.Unix(0, c.GetCreatedAt())),
		CPU:       p.cpuStats("ctr/"+c.GetId(), cs.GetCpu(), now),
		Memory:    memoryStats(cs.GetMemory(), now),
	}
	if full {
		if wl := cs.GetWritableLayer(); wl != nil {
			out.Rootfs = fsUsage(wl, now, fsm)
		}
		out.Logs = p.logStats(pod, name, now, fsm)
	}
	return out
}

// cpuStats converts a runtime CPU sample; without one, the kubelet reports
// zero usage now.
func (p *Provider) cpuStats(key string, u *runtimeapi.CpuUsage, now time.Time) *v1alpha1.CPUStats {
	if u == nil {
		var zero, zeroRate uint64
		return &v1alpha1.CPUStats{Time: metav1.NewTime(now), UsageCoreNanoSeconds: &zero, UsageNanoCores: &zeroRate}
	}
	out := &v1alpha1.CPUStats{Time: nanoTime(u.GetTimestamp(), now)}
	if v := u.GetUsageCoreNanoSeconds(); v != nil {
		out.UsageCoreNanoSeconds = &v.Value
	}
	switch {
	case u.GetUsageNanoCores() != nil:
		out.UsageNanoCores = &u.GetUsageNanoCores().Value
	case out.UsageCoreNanoSeconds != nil:
		out.UsageNanoCores = p.cpu.nanoCores(key, now, out.Time.UnixNano(), *out.UsageCoreNanoSeconds)
	}
	return out
}

// memoryStats converts a runtime memory sample; without one, the kubelet
// reports a zero working set now.
func memoryStats(u *runtimeapi.MemoryUsage, now time.Time) *v1alpha1.MemoryStats {
	if u == nil {
		var zero uint64
		return &v1alpha1.MemoryStats{Time: metav1.NewTime(now), WorkingSetBytes: &zero}
	}
	return &v1alpha1.MemoryStats{
		Time:            nanoTime(u.GetTimestamp(), now),
		AvailableBytes:  value(u.GetAvailableBytes()),
		UsageBytes:      value(u.GetUsageBytes()),
		WorkingSetBytes: value(u.GetWorkingSetBytes()),
		RSSBytes:        value(u.GetRssBytes()),
		PageFaults:      value(u.GetPageFaults()),
		MajorPageFaults: value(u.GetMajorPageFaults()),
	}
}

func networkStats(u *runtimeapi.NetworkUsage, now time.Time) *v1alpha1.NetworkStats {
	iface := func(i *runtimeapi.NetworkInterfaceUsage) v1alpha1.InterfaceStats {
		return v1alpha1.InterfaceStats{
			Name:     i.GetName(),
			RxBytes:  value(i.GetRxBytes()),
			RxErrors: value(i.GetRxErrors()),
			TxBytes:  value(i.GetTxBytes()),
			TxErrors: value(i.GetTxErrors()),
		}
	}
	out := &v1alpha1.NetworkStats{Time: nanoTime(u.GetTimestamp(), now)}
	if d := u.GetDefaultInterface(); d != nil {
		out.InterfaceStats = iface(d)
	}
	for _, i := range u.GetInterfaces() {
		out.Interfaces = append(out.Interfaces, iface(i))
	}
	return out
}

func value(v *runtimeapi.UInt64Value) *uint64 {
	if v == nil {
		return nil
	}
	x := v.GetValue()
	return &x
}

// addContainerToPod sums a container's CPU and memory into its pod's, as
// the kubelet does when it has no pod-level numbers (absent fields count
// as zero).
func addContainerToPod(ps *v1alpha1.PodStats, cs *v1alpha1.ContainerStats) {
	if c := cs.CPU; c != nil {
		if ps.CPU == nil {
			ps.CPU = &v1alpha1.CPUStats{UsageCoreNanoSeconds: new(uint64), UsageNanoCores: new(uint64)}
		}
		ps.CPU.Time = c.Time
		*ps.CPU.UsageCoreNanoSeconds += deref(c.UsageCoreNanoSeconds)
		*ps.CPU.UsageNanoCores += deref(c.UsageNanoCores)
	}
	if m := cs.Memory; m != nil {
		if ps.Memory == nil {
			ps.Memory = &v1alpha1.MemoryStats{
				AvailableBytes: new(uint64), UsageBytes: new(uint64), WorkingSetBytes: new(uint64),
				RSSBytes: new(uint64), PageFaults: new(uint64), MajorPageFaults: new(uint64),
			}
		}
		ps.Memory.Time = m.Time
		*ps.Memory.AvailableBytes += deref(m.AvailableBytes)
		*ps.Memory.UsageBytes += deref(m.UsageBytes)
		*ps.Memory.WorkingSetBytes += deref(m.WorkingSetBytes)
		*ps.Memory.RSSBytes += deref(m.RSSBytes)
		*ps.Memory.PageFaults += deref(m.PageFaults)
		*ps.Memory.MajorPageFaults += deref(m.MajorPageFaults)
	}
}

func deref(v *uint64) uint64 {
	if v == nil {
		return 0
	}
	return *v
}
