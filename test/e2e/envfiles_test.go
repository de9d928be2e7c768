//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// envFilesPod is the upstream "MirrorPod with EnvFiles" spec's pod: an init
// container writes an env file into an emptyDir, the app container takes
// two variables from it (fileKeyRef) and prints them. setup is the init
// container's shell command, env the app's extra env entries.
func envFilesPod(name, setup, env string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  initContainers:
  - name: setup-envfile
    image: busybox:1.35
    command: ["sh", "-c", %q]
    volumeMounts: [{name: config, mountPath: /data}]
  containers:
  - name: use-envfile
    image: busybox:1.35
    command: ["sh", "-c", "env | grep -E '(CONFIG_1|CONFIG_2|OPTIONAL)' | sort"]
    env:
    - name: CONFIG_1
      valueFrom: {fileKeyRef: {volumeName: config, path: config.env, key: CONFIG_1}}
    - name: CONFIG_2
      valueFrom: {fileKeyRef: {volumeName: config, path: config.env, key: CONFIG_2}}
%s  volumes:
  - {name: config, emptyDir: {}}
`, name, setup, env)
}

// Variables from a file a container wrote (EnvFiles, on by default in
// v1.37): the value of each key, an optional missing key skipped; a
// missing key and a symlink a container planted are a
// CreateContainerConfigError.
func TestEnvFiles(t *testing.T) {
	n, dir, _ := lifecycleNodelet(t, "envfiles")
	const write = `echo CONFIG_1=\'value1\' > /data/config.env && echo CONFIG_2=\'value 2\' >> /data/config.env`
	writeManifest(t, dir, "good.yaml", envFilesPod("envfile", write, `    - name: OPTIONAL
      valueFrom: {fileKeyRef: {volumeName: config, path: config.env, key: OPTIONAL, optional: true}}
`))
	writeManifest(t, dir, "missing.yaml", envFilesPod("envfilemissing", write, `    - name: MISSING
      valueFrom: {fileKeyRef: {volumeName: config, path: config.env, key: MISSING}}
`))
	// The file is a symlink to a file of the same name on the host: it
	// must not be followed.
	writeManifest(t, dir, "symlink.yaml", envFilesPod("envfilesymlink", "ln -s /etc/hostname /data/config.env", ""))

	api := n.api(t)
	waitPhase(t, n, "envfile-e2e", "Succeeded", 90*time.Second)
	logs, err := api.get("/containerLogs/default/envfile-e2e/use-envfile")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(logs), "CONFIG_1=value1\nCONFIG_2=value 2\n"; got != want {
		t.Errorf("use-envfile printed %q, want %q", got, want)
	}

	waitPod(t, api, "envfilemissing-e2e", 60*time.Second, "use-envfile waits for its env", waitingWith("use-envfile",
		"CreateContainerConfigError", `environment variable key "MISSING" not found in file "config.env" of volume "config"`))
	waitPod(t, api, "envfilesymlink-e2e", 60*time.Second, "use-envfile refused the symlink", waitingWith("use-envfile",
		"CreateContainerConfigError", `couldn't parse env file "config.env" of volume "config": symlink refused`))
	for _, pod := range []string{"envfilemissing-e2e", "envfilesymlink-e2e"} {
		p, err := api.pod(pod)
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.Phase != v1.PodPending {
			t.Errorf("%s: phase %s, want Pending", pod, p.Status.Phase)
		}
		if w := containerStatus(p, "use-envfile").State.Waiting; w == nil || strings.Contains(w.Message, shared.work) {
			t.Errorf("%s: waiting %+v, want a message without host paths", pod, w)
		}
	}
}
