package nodecreds

import (
	"bytes"
	"context"
	"encoding/base64"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/pure/pullcreds"
)

func TestCandidates(t *testing.T) {
	got := Candidates("/var/lib/kubelet", "/srv", "/root")
	want := []Candidate{
		{"/var/lib/kubelet/config.json", ConfigJSON},
		{"/srv/config.json", ConfigJSON},
		{"/root/.docker/config.json", ConfigJSON},
		{"/.docker/config.json", ConfigJSON},
		{"/var/lib/kubelet/.dockercfg", Dockercfg},
		{"/srv/.dockercfg", Dockercfg},
		{"/root/.dockercfg", Dockercfg},
		{"/.dockercfg", Dockercfg},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Candidates = %v\nwant %v", got, want)
	}
	if got := Candidates("/r", "", ""); len(got) != 4 || got[0].Path != "/r/config.json" || got[1].Path != "/.docker/config.json" || got[3].Path != "/.dockercfg" {
		t.Errorf("without work and home directories: %v", got)
	}
}

type fixture struct {
	root, work, home string
	clock            *clocktesting.FakeClock
	logs             *bytes.Buffer
	k                *Keyring
}

func newFixture(t *testing.T, more ...pullcreds.Lookup) *fixture {
	d := t.TempDir()
	f := &fixture{root: filepath.Join(d, "root"), work: filepath.Join(d, "work"), home: filepath.Join(d, "home"),
		clock: clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0)), logs: &bytes.Buffer{}}
	for _, dir := range []string{f.root, f.work, filepath.Join(f.home, ".docker")} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	log := slog.New(slog.NewTextHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	f.k = New(Options{RootDir: f.root, WorkDir: f.work, Home: f.home}, f.clock, log, more...)
	return f
}

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

func auth(user, password string) string {
	return base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
}

func configJSON(user string) string {
	return `{"auths":{"127.0.0.1:5000":{"auth":"` + auth(user, "hunter2-"+user) + `"}}}`
}

// users are the users of the credentials for image, each with the file
// it came from (its base name).
func users(t *testing.T, k *Keyring, image string) []string {
	t.Helper()
	creds, err := k.Credentials(context.Background(), image)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, c := range creds {
		out = append(out, c.Auth.GetUsername()+"@"+filepath.Base(filepath.Dir(c.Source.Name))+"/"+filepath.Base(c.Source.Name))
	}
	return out
}

func TestFirstValidFileWins(t *testing.T) {
	f := newFixture(t)
	if got := users(t, f.k, "127.0.0.1:5000/app"); got != nil {
		t.Fatalf("no files: %v", got)
	}
	f.clock.Step(Lifetime)
	write(t, filepath.Join(f.home, ".dockercfg"), `{"127.0.0.1:5000":{"auth":"`+auth("legacy", "pw")+`"}}`)
	write(t, filepath.Join(f.home, ".docker", "config.json"), configJSON("home"))
	write(t, filepath.Join(f.work, "config.json"), `{"auths":{"127.0.0.1:5000":{"auth":"!!hunter2"}}}`)
	write(t, filepath.Join(f.root, "config.json"), `{"auths": hunter2`)
	// The two malformed files are passed over, each logged with its
	// path and never its content; the home file wins over .dockercfg.
	if got := users(t, f.k, "127.0.0.1:5000/app"); !reflect.DeepEqual(got, []string{"home@.docker/config.json"}) {
		t.Errorf("credentials %v", got)
	}
	logs := f.logs.String()
	for _, p := range []string{filepath.Join(f.root, "config.json"), filepath.Join(f.work, "config.json")} {
		if !strings.Contains(logs, "ignoring node docker config file") || !strings.Contains(logs, p) {
			t.Errorf("no warning naming %s in %s", p, logs)
		}
	}
	if strings.Contains(logs, "hunter2") {
		t.Errorf("logs hold a credential: %s", logs)
	}
	// Only config.json files are missing: the legacy file.
	for _, p := range []string{filepath.Join(f.root, "config.json"), filepath.Join(f.work, "config.json"), filepath.Join(f.home, ".docker", "config.json")} {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
	f.clock.Step(Lifetime)
	if got := users(t, f.k, "127.0.0.1:5000/app"); !reflect.DeepEqual(got, []string{"legacy@home/.dockercfg"}) {
		t.Errorf("legacy credentials %v", got)
	}
}

// The files read are kept for Lifetime, as the kubelet keeps them.
func TestReadAgainAfterLifetime(t *testing.T) {
	f := newFixture(t)
	write(t, filepath.Join(f.root, "config.json"), configJSON("one"))
	if got := users(t, f.k, "127.0.0.1:5000/app"); !reflect.DeepEqual(got, []string{"one@root/config.json"}) {
		t.Fatalf("credentials %v", got)
	}
	write(t, filepath.Join(f.root, "config.json"), configJSON("two"))
	f.clock.Step(Lifetime - time.Second)
	if got := users(t, f.k, "127.0.0.1:5000/app"); !reflect.DeepEqual(got, []string{"one@root/config.json"}) {
		t.Errorf("within the lifetime: %v", got)
	}
	f.clock.Step(time.Second)
	if got := users(t, f.k, "127.0.0.1:5000/app"); !reflect.DeepEqual(got, []string{"two@root/config.json"}) {
		t.Errorf("after the lifetime: %v", got)
	}
}

// A FIFO (or anything not a regular file) is refused without blocking on
// it; a file over the limit is refused.
func TestRefusesWhatIsNotAConfigFile(t *testing.T) {
	f := newFixture(t)
	if err := syscall.Mkfifo(filepath.Join(f.root, "config.json"), 0o600); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(f.work, "config.json"), strings.Repeat(" ", pullcreds.MaxConfigSize+1))
	write(t, filepath.Join(f.home, ".docker", "config.json"), configJSON("home"))
	if got := users(t, f.k, "127.0.0.1:5000/app"); !reflect.DeepEqual(got, []string{"home@.docker/config.json"}) {
		t.Errorf("credentials %v", got)
	}
	if !strings.Contains(f.logs.String(), "not a regular file") || !strings.Contains(f.logs.String(), "larger than") {
		t.Errorf("logs %s", f.logs)
	}
}

type fixed []pullcreds.Credential

func (l fixed) Credentials(context.Context, string) ([]pullcreds.Credential, error) { return l, nil }

// Further sources come after the files, in the order given.
func TestMoreSourcesAfterFiles(t *testing.T) {
	plugin := func(user string) pullcreds.Lookup {
		return fixed{{Auth: nil, Source: pullcreds.Source{Kind: pullcreds.FromProvider, Provider: user}}}
	}
	f := newFixture(t, plugin("p1"), plugin("p2"))
	write(t, filepath.Join(f.root, "config.json"), configJSON("file"))
	creds, err := f.k.Credentials(context.Background(), "127.0.0.1:5000/app")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range creds {
		got = append(got, string(c.Source.Kind)+":"+c.Source.Provider)
	}
	if want := []string{"Node:", "Provider:p1", "Provider:p2"}; !reflect.DeepEqual(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
}
