package podruntime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/nodelet/nodelet/internal/pipeline/cri"
	"github.com/nodelet/nodelet/internal/pipeline/podworker"
	"github.com/nodelet/nodelet/internal/pipeline/statusmanager"
	"github.com/nodelet/nodelet/internal/pure/envvars"
	"github.com/nodelet/nodelet/internal/pure/podsetup"
)

// envFileVolumes has one volume, "config", holding config.env.
type envFileVolumes struct{ content string }

func (v envFileVolumes) EnvFile(pod *v1.Pod, volume, path string, limit int64) ([]byte, error) {
	if volume != "config" {
		return nil, fmt.Errorf("volume %q: %w", volume, envvars.ErrVolumeNotFound)
	}
	if path != "config.env" {
		return nil, errors.New("no such file or directory")
	}
	return []byte(v.content), nil
}

// withEnvFiles is a fixture and the setup of a volumes hook whose env
// files hold content.
func withEnvFiles(t *testing.T, content string) (*fixture, podsetup.Setup) {
	f := newFixture(t)
	log := slog.New(slog.DiscardHandler)
	c := cri.New(f.rs, f.is, "fake", cri.DefaultTimeouts(), log)
	f.m = New(c, Options{PodLogsDir: "/var/log/pods"}, Deps{Clock: f.clock, Log: log, Status: statusmanager.New(nil)})
	return f, podsetup.Setup{Files: envFileVolumes{content: content}}
}

func fileKeyEnv(name, volume, key string) v1.EnvVar {
	return v1.EnvVar{Name: name, ValueFrom: &v1.EnvVarSource{FileKeyRef: &v1.FileKeySelector{
		VolumeName: volume, Path: "config.env", Key: key}}}
}

// A fileKeyRef takes its value from the env file in the pod's volume.
func TestEnvFromFile(t *testing.T) {
	f, setup := withEnvFiles(t, "CONFIG_1='value1'\nCONFIG_2='value2'\n")
	pod := testPod()
	c := &pod.Spec.Containers[0]
	c.Env = []v1.EnvVar{fileKeyEnv("CONFIG_1", "config", "CONFIG_1"), fileKeyEnv("TWO", "config", "CONFIG_2")}
	extras, err := f.m.containerExtras(t.Context(), pod, c, nil, setup, nil)
	if err != nil {
		t.Fatal(err)
	}
	if env := envOf(extras); env["CONFIG_1"] != "value1" || env["TWO"] != "value2" {
		t.Errorf("env = %v", env)
	}
}

// A missing key or volume is CreateContainerConfigError with the kubelet's
// message, and nothing is created for the container.
func TestEnvFromFileConfigError(t *testing.T) {
	for _, tc := range []struct {
		env  v1.EnvVar
		want string
	}{
		{fileKeyEnv("X", "config", "MISSING"), `environment variable key "MISSING" not found in file "config.env" of volume "config"`},
		{fileKeyEnv("X", "other", "CONFIG_1"), `cannot find the volume "other" referenced by FileKeyRef`},
	} {
		f, setup := withEnvFiles(t, "CONFIG_1='value1'\n")
		pod := testPod()
		pod.Spec.Containers = pod.Spec.Containers[:1]
		pod.Spec.Containers[0].Env = []v1.EnvVar{tc.env}
		st, err := f.m.syncPod(context.Background(), podworker.SyncRequest{Pod: pod, Setup: setup})
		if err == nil {
			t.Fatal("no error")
		}
		w := st.ContainerStatuses[0].State.Waiting
		if w == nil || w.Reason != "CreateContainerConfigError" || w.Message != tc.want {
			t.Errorf("state %+v, want CreateContainerConfigError %q", st.ContainerStatuses[0].State, tc.want)
		}
		if strings.Contains(f.mutations(), "CreateContainer") {
			t.Error("container created although its config failed")
		}
	}
}
