package agent

import (
	"context"
	"log/slog"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodelet/nodelet/internal/podruntime"
	"github.com/nodelet/nodelet/internal/podsource"
)

// syncPods is the minimal sync loop: it re-reads the manifest path every
// FileCheckFrequency, syncs every pod at each read and every SyncFrequency,
// and removes nodelet's pods that no manifest wants any more.
func (a *Agent) syncPods(ctx context.Context, pods *podruntime.Manager) error {
	fileTick := a.deps.Clock.NewTicker(a.cfg.FileCheckFrequency)
	defer fileTick.Stop()
	syncTick := a.deps.Clock.NewTicker(a.cfg.SyncFrequency)
	defer syncTick.Stop()
	reported := map[string]string{} // file -> last error logged for it
	for {
		a.syncOnce(ctx, pods, reported)
		select {
		case <-ctx.Done():
			a.deps.Log.Info("stopping; pods keep running")
			return nil
		case <-fileTick.C():
		case <-syncTick.C():
		}
	}
}

func (a *Agent) syncOnce(ctx context.Context, pods *podruntime.Manager, reported map[string]string) {
	log := a.deps.Log
	if a.cfg.PodManifestPath == "" {
		return
	}
	snap, err := podsource.ReadPath(a.cfg.PodManifestPath, a.cfg.NodeName)
	if err != nil {
		// Without a successful read nothing is known to be unwanted, so
		// nothing is removed.
		log.Error("cannot read manifests; running pods are left as they are", "path", a.cfg.PodManifestPath, "err", err)
		return
	}
	reportFileErrors(log, snap.Errors, reported)
	want := map[types.UID]*v1.Pod{}
	for _, pod := range snap.Pods {
		want[pod.UID] = pod
		if err := pods.SyncPod(ctx, pod); err != nil && ctx.Err() == nil {
			log.Error("sync pod failed", "pod", pod.Namespace+"/"+pod.Name, "err", err)
		}
	}
	if len(snap.Errors) > 0 {
		// A file that fails to parse may be half-written; its pods are
		// not removed until it reads cleanly again.
		return
	}
	running, err := pods.RunningPods(ctx)
	if err != nil {
		log.Error("list running pods failed", "err", err)
		return
	}
	for uid, name := range running {
		if _, ok := want[uid]; ok {
			continue
		}
		log.Info("removing pod that no manifest defines", "pod", name, "podUID", uid)
		if err := pods.KillPod(ctx, uid); err != nil && ctx.Err() == nil {
			log.Error("remove pod failed", "pod", name, "err", err)
		}
	}
}

// reportFileErrors logs each bad manifest once per distinct reason.
func reportFileErrors(log *slog.Logger, errs []podsource.FileError, reported map[string]string) {
	current := map[string]bool{}
	for _, fe := range errs {
		current[fe.Path] = true
		if reported[fe.Path] == fe.Reason() {
			continue
		}
		reported[fe.Path] = fe.Reason()
		log.Error("manifest skipped", "file", fe.Path, "reason", fe.Reason())
	}
	for path := range reported {
		if !current[path] {
			delete(reported, path)
		}
	}
}
