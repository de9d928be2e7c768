package gc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nodelet/nodelet/internal/base/beneath"
	"github.com/nodelet/nodelet/internal/pipeline/cri"
	"github.com/nodelet/nodelet/internal/pure/podspec"
)

// CollectContainers removes the dead containers and unneeded sandboxes
// chosen by plan, with the containers' log files, then the log directory of
// every inactive pod of which nothing is left. podActive reports whether a
// pod is still wanted: it must answer true for every pod nodelet may still
// run (until the pod sources have been read, for all of them). A failed
// removal does not stop the others; all failures are returned together.
func (c *Collector) CollectContainers(ctx context.Context, podActive func(uid types.UID) bool) error {
	return c.collect(ctx, podActive, c.policy)
}

// ReclaimContainers is CollectContainers for a node short of disk (the
// kubelet's DeleteAllUnusedContainers): dead containers go whatever their
// age.
func (c *Collector) ReclaimContainers(ctx context.Context, podActive func(uid types.UID) bool) error {
	p := c.policy
	p.MinAge = 0
	return c.collect(ctx, podActive, p)
}

func (c *Collector) collect(ctx context.Context, podActive func(uid types.UID) bool, policy Policy) error {
	c.mu.Lock()
	defer c.mu.Unlock()

	sandboxes, err := c.rt.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{LabelSelector: podspec.ManagedSelector()})
	if err != nil {
		return fmt.Errorf("collect containers: %w", err)
	}
	containers, err := c.rt.ListContainers(ctx, &runtimeapi.ContainerFilter{LabelSelector: podspec.ManagedSelector()})
	if err != nil {
		return fmt.Errorf("collect containers: %w", err)
	}
	active := memoize(podActive)
	rmContainers, rmSandboxes := plan(sandboxes, containers, active, policy, c.clk.Now())

	ctrByID := map[string]*runtimeapi.Container{}
	for _, ctr := range containers {
		ctrByID[ctr.GetId()] = ctr
	}
	var errs []error
	gone := map[string]bool{}          // removed (or already absent) objects
	sandboxFailed := map[string]bool{} // sandboxes with a container left
	for _, id := range rmContainers {
		if ctx.Err() != nil {
			return errors.Join(append(errs, ctx.Err())...)
		}
		ctr := ctrByID[id]
		removed, err := c.removeContainer(ctx, ctr)
		if err != nil {
			errs = append(errs, fmt.Errorf("pod %s: %w", containerPodUID(ctr), err))
		}
		if removed {
			gone[id] = true
		} else {
			sandboxFailed[ctr.GetPodSandboxId()] = true
		}
	}
	for _, id := range rmSandboxes {
		if ctx.Err() != nil {
			return errors.Join(append(errs, ctx.Err())...)
		}
		if sandboxFailed[id] {
			// RemovePodSandbox would take the container along, leaving
			// its log file behind: retry the container first next time.
			continue
		}
		if err := c.rt.RemovePodSandbox(ctx, id); err != nil && !cri.IsNotFound(err) {
			errs = append(errs, err)
			continue
		}
		gone[id] = true
		c.log.Info("removed pod sandbox", "sandbox", id)
	}

	for _, pod := range finishedPods(sandboxes, containers, active, gone) {
		if err := c.removePodLogDir(pod); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removeContainer removes a container and then its log files. removed
// reports whether the container is gone (an error may still be returned
// for its logs).
func (c *Collector) removeContainer(ctx context.Context, ctr *runtimeapi.Container) (removed bool, err error) {
	id := ctr.GetId()
	// The log path is only known while the container exists.
	resp, err := c.rt.ContainerStatus(ctx, id)
	if cri.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	if s := resp.GetStatus().GetState(); s == runtimeapi.ContainerState_CONTAINER_RUNNING || s == runtimeapi.ContainerState_CONTAINER_UNKNOWN {
		return false, nil // restarted or unknown since the listing
	}
	if err := c.rt.RemoveContainer(ctx, id); err != nil && !cri.IsNotFound(err) {
		return false, err
	}
	c.log.Info("removed container", "container", id, "name", containerName(ctr), "pod", containerPodUID(ctr))
	labels := ctr.GetLabels()
	link := podspec.LegacyLogLink(c.policy.PodLogsDir, labels[podspec.LabelPodName], labels[podspec.LabelPodNamespace], containerName(ctr), id)
	if err := os.Remove(link); err != nil && !errors.Is(err, fs.ErrNotExist) {
		c.log.Warn("removing the container's /var/log/containers link", "link", link, "err", err)
	}
	if err := c.removeContainerLogs(resp.GetStatus().GetLogPath()); err != nil {
		return true, fmt.Errorf("container %s: %w", id, err)
	}
	return true, nil
}

// removeContainerLogs deletes a log file and its rotations, if it is under
// the pod logs directory, in the log's directory opened without following
// any symlink (a symlink entry is removed itself, never its target).
func (c *Collector) removeContainerLogs(path string) error {
	if path == "" {
		return nil
	}
	dir, name, err := c.openLogDir(path)
	switch {
	case errors.Is(err, beneath.ErrOutside):
		c.log.Warn("container log outside the pod logs directory left alone", "path", path, "podLogsDir", c.policy.PodLogsDir)
		return nil
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("remove container log %s: %w", path, err)
	}
	defer dir.Close()
	rotated, err := rotatedLogs(dir, name)
	if err != nil {
		return err
	}
	var errs []error
	for _, n := range append(rotated, name) {
		if err := dir.Remove(n); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove container log: %w", err))
		}
	}
	return errors.Join(errs...)
}

// podRef names a pod whose log directory can go.
type podRef struct {
	uid             types.UID
	namespace, name string
}

// finishedPods returns the inactive pods that had objects in the listing,
// all of which are now gone.
func finishedPods(sandboxes []*runtimeapi.PodSandbox, containers []*runtimeapi.Container, active func(types.UID) bool, gone map[string]bool) []podRef {
	pods := map[types.UID]*podRef{}
	left := map[types.UID]bool{}
	note := func(uid types.UID, id string, labels map[string]string, meta *runtimeapi.PodSandboxMetadata) {
		if uid == "" || active(uid) {
			return
		}
		p := pods[uid]
		if p == nil {
			p = &podRef{uid: uid}
			pods[uid] = p
		}
		if p.namespace == "" {
			p.namespace = cmp.Or(labels[podspec.LabelPodNamespace], meta.GetNamespace())
		}
		if p.name == "" {
			p.name = cmp.Or(labels[podspec.LabelPodName], meta.GetName())
		}
		if !gone[id] {
			left[uid] = true
		}
	}
	for _, sb := range sandboxes {
		if podspec.IsManaged(sb.GetLabels()) {
			note(sandboxPodUID(sb), sb.GetId(), sb.GetLabels(), sb.GetMetadata())
		}
	}
	for _, ctr := range containers {
		if podspec.IsManaged(ctr.GetLabels()) {
			note(containerPodUID(ctr), ctr.GetId(), ctr.GetLabels(), nil)
		}
	}
	var out []podRef
	for uid, p := range pods {
		if !left[uid] {
			out = append(out, *p)
		}
	}
	return out
}

// removePodLogDir removes <PodLogsDir>/<namespace>_<name>_<uid>.
func (c *Collector) removePodLogDir(p podRef) error {
	for _, part := range []string{p.namespace, p.name, string(p.uid)} {
		if part == "" || part == "." || part == ".." || strings.ContainsRune(part, filepath.Separator) {
			c.log.Warn("pod log directory not removed: bad pod name", "pod", p.uid, "namespace", p.namespace, "name", p.name)
			return nil
		}
	}
	dir := filepath.Join(c.policy.PodLogsDir, p.namespace+"_"+p.name+"_"+string(p.uid))
	if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove log directory of pod %s: %w", p.uid, err)
	}
	c.log.Info("removed pod log directory", "pod", p.uid, "dir", dir)
	return nil
}
