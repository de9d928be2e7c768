// Package nodecreds is beside the runtime manager (stage 5): the node's
// own image pull credentials, the kubelet's default keyring. They are the
// first valid docker config file in the kubelet's search order (see
// Candidates), re-read every five minutes as the kubelet's caching
// provider re-reads it, followed by further sources the agent adds (the
// credential provider plugins). Every pod of the node may pull with them;
// the pod's own image pull secrets come first (podhooks.PullSecrets).
//
// The files are read bounded; a malformed one is logged with its path
// (never its content) and passed over for the next, as the kubelet passes
// it over. Nothing here logs a credential.
package nodecreds

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/base/bounded"
	"github.com/nodelet/nodelet/internal/pure/pullcreds"
)

// Lifetime is how long the files read are used before they are read
// again: the kubelet's CachingDockerConfigProvider lifetime.
const Lifetime = 5 * time.Minute

// Format is a docker config file's format.
type Format int

const (
	ConfigJSON Format = iota // {"auths": {...}}: config.json
	Dockercfg                // {...}: the legacy .dockercfg
)

// Candidate is one place a node docker config file may be.
type Candidate struct {
	Path   string
	Format Format
}

// Candidates are the node's docker config files in the order the kubelet
// looks for them (its ReadDockerConfigFile): config.json in the root
// directory, the working directory, $HOME/.docker and /.docker; then, only
// if none of those is valid, .dockercfg in the root directory, the
// working directory, $HOME and /. Only the first valid file is used. An
// empty home leaves out the home directory's (the kubelet would look
// relative to its working directory, which is already in the list).
func Candidates(rootDir, workDir, home string) []Candidate {
	jsonDirs := []string{rootDir, workDir, joinIf(home, ".docker"), "/.docker"}
	cfgDirs := []string{rootDir, workDir, home, "/"}
	var out []Candidate
	for _, d := range jsonDirs {
		if d != "" {
			out = append(out, Candidate{filepath.Join(d, "config.json"), ConfigJSON})
		}
	}
	for _, d := range cfgDirs {
		if d != "" {
			out = append(out, Candidate{filepath.Join(d, ".dockercfg"), Dockercfg})
		}
	}
	return out
}

func joinIf(dir, name string) string {
	if dir == "" {
		return ""
	}
	return filepath.Join(dir, name)
}

// Options say where the node's files are looked for.
type Options struct {
	// RootDir is the kubelet's --root-dir, looked in first.
	RootDir string
	// WorkDir and Home are the process's working and home directories;
	// "" leaves them out.
	WorkDir, Home string
}

// DefaultOptions are the kubelet's places for rootDir: the process's
// working directory and $HOME.
func DefaultOptions(rootDir string) Options {
	wd, _ := os.Getwd()
	home, _ := os.UserHomeDir()
	return Options{RootDir: rootDir, WorkDir: wd, Home: home}
}

// Keyring is the node's credentials: a pullcreds.Lookup.
type Keyring struct {
	candidates []Candidate
	more       []pullcreds.Lookup
	clock      clock.Clock
	log        *slog.Logger

	mu     sync.Mutex
	files  *pullcreds.Keyring // nil: not read yet, or nothing found
	readAt time.Time
	read   bool
}

// New is the node keyring over the files of opts, followed by more (in
// order: the credential provider plugins). It reads nothing until asked.
func New(opts Options, clk clock.Clock, log *slog.Logger, more ...pullcreds.Lookup) *Keyring {
	return &Keyring{candidates: Candidates(opts.RootDir, opts.WorkDir, opts.Home), more: more, clock: clk, log: log}
}

// Credentials gives the credentials of the node's file for image, then
// those of the further sources.
func (k *Keyring) Credentials(ctx context.Context, image string) ([]pullcreds.Credential, error) {
	return append(pullcreds.Union{k.fileKeyring()}, k.more...).Credentials(ctx, image)
}

// fileKeyring is the keyring of the first valid file, read again once it
// is older than Lifetime.
func (k *Keyring) fileKeyring() *pullcreds.Keyring {
	k.mu.Lock()
	defer k.mu.Unlock()
	now := k.clock.Now()
	if k.read && now.Sub(k.readAt) < Lifetime {
		return k.files
	}
	k.files, k.read, k.readAt = k.readFirst(), true, now
	return k.files
}

// readFirst reads the candidates in order and returns the keyring of the
// first valid one; nil if none is.
func (k *Keyring) readFirst() *pullcreds.Keyring {
	for _, c := range k.candidates {
		cfg, err := readFile(c)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			k.log.Warn("ignoring node docker config file", "path", c.Path, "err", err)
			continue
		}
		k.log.Debug("node docker config file", "path", c.Path, "registries", len(cfg))
		var kr pullcreds.Keyring
		kr.Add(pullcreds.Source{Kind: pullcreds.FromNode, Name: c.Path}, cfg)
		return &kr
	}
	return nil
}

// readFile reads and parses one candidate: a regular file (a FIFO or
// device is refused without opening it) of at most
// pullcreds.MaxConfigSize bytes.
func readFile(c Candidate) (pullcreds.Config, error) {
	st, err := os.Stat(c.Path)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("not a regular file (%s)", st.Mode().Type())
	}
	data, err := bounded.ReadFile(c.Path, pullcreds.MaxConfigSize)
	if err != nil {
		return nil, err
	}
	if c.Format == Dockercfg {
		return pullcreds.ParseDockercfg(data)
	}
	return pullcreds.ParseConfigJSON(data)
}
