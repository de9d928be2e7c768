package gc

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/pipeline/cri"
)

// Defaults, the kubelet's.
const (
	// DefaultMaxPerPodContainer is --maximum-dead-containers-per-container.
	DefaultMaxPerPodContainer = 1
	// DefaultPodLogsDir is where the CRI writes container logs.
	DefaultPodLogsDir = "/var/log/pods"
	// DefaultContainerGCPeriod is how often the kubelet collects containers.
	DefaultContainerGCPeriod = time.Minute
	// DefaultLogMaxSize is --container-log-max-size (10Mi).
	DefaultLogMaxSize int64 = 10 << 20
	// DefaultLogMaxFiles is --container-log-max-files.
	DefaultLogMaxFiles = 5
	// DefaultLogMonitorInterval is --container-log-monitor-interval.
	DefaultLogMonitorInterval = 10 * time.Second
)

// Runtime is what the collector needs of the container runtime;
// *cri.Client satisfies it.
type Runtime interface {
	ListPodSandbox(ctx context.Context, filter *runtimeapi.PodSandboxFilter) ([]*runtimeapi.PodSandbox, error)
	ListContainers(ctx context.Context, filter *runtimeapi.ContainerFilter) ([]*runtimeapi.Container, error)
	ContainerStatus(ctx context.Context, id string) (*runtimeapi.ContainerStatusResponse, error)
	RemoveContainer(ctx context.Context, id string) error
	RemovePodSandbox(ctx context.Context, id string) error
	ReopenContainerLog(ctx context.Context, id string) error
}

var _ Runtime = (*cri.Client)(nil)

// Policy says which dead containers are kept.
type Policy struct {
	// MaxPerPodContainer is how many exited instances are kept per
	// container name of a pod that is still active, newest first. 0 means
	// DefaultMaxPerPodContainer; negative means no limit.
	MaxPerPodContainer int
	// MinAge is how old (since creation) a container must be before it is
	// removed. Younger containers are neither removed nor counted.
	MinAge time.Duration
	// PodLogsDir is the root of the pods' log directories (empty:
	// DefaultPodLogsDir). Files outside it are never deleted.
	PodLogsDir string
}

func (p Policy) withDefaults() Policy {
	if p.MaxPerPodContainer == 0 {
		p.MaxPerPodContainer = DefaultMaxPerPodContainer
	}
	if p.MinAge < 0 {
		p.MinAge = 0
	}
	if p.PodLogsDir == "" {
		p.PodLogsDir = DefaultPodLogsDir
	}
	return p
}

// LogPolicy says when container logs are rotated and how many are kept.
type LogPolicy struct {
	// MaxSize is the size in bytes at which a log file is rotated (0:
	// DefaultLogMaxSize).
	MaxSize int64
	// MaxFiles is how many files a container's log is made of, the live
	// one included (0: DefaultLogMaxFiles; at least 2).
	MaxFiles int
	// MonitorInterval is how often Run rotates logs (0:
	// DefaultLogMonitorInterval).
	MonitorInterval time.Duration
}

func (p LogPolicy) withDefaults() LogPolicy {
	if p.MaxSize <= 0 {
		p.MaxSize = DefaultLogMaxSize
	}
	if p.MaxFiles == 0 {
		p.MaxFiles = DefaultLogMaxFiles
	}
	if p.MaxFiles < 2 {
		p.MaxFiles = 2
	}
	if p.MonitorInterval <= 0 {
		p.MonitorInterval = DefaultLogMonitorInterval
	}
	return p
}

// Collector removes dead containers, unneeded sandboxes and old logs.
// Its methods may be called from several goroutines; they run one at a
// time.
type Collector struct {
	rt        Runtime
	policy    Policy
	logPolicy LogPolicy
	clk       clock.Clock
	log       *slog.Logger

	mu sync.Mutex // one collection or rotation at a time
	// logPaths is the log path of each container running at the last
	// rotation, by container ID.
	logPaths map[string]string
}

// New returns a collector; zero fields of the policies take the defaults.
func New(rt Runtime, policy Policy, logPolicy LogPolicy, clk clock.Clock, log *slog.Logger) *Collector {
	return &Collector{
		rt:        rt,
		policy:    policy.withDefaults(),
		logPolicy: logPolicy.withDefaults(),
		clk:       clk,
		log:       log,
	}
}

// Run collects containers every period (0: DefaultContainerGCPeriod) and
// rotates logs every LogPolicy.MonitorInterval until ctx ends. The first
// run of each comes one period after the start. Errors are logged.
func (c *Collector) Run(ctx context.Context, period time.Duration, podActive func(uid types.UID) bool) {
	if period <= 0 {
		period = DefaultContainerGCPeriod
	}
	rotate := c.logPolicy.MonitorInterval
	gcTimer := c.clk.NewTimer(period)
	defer gcTimer.Stop()
	rotateTimer := c.clk.NewTimer(rotate)
	defer rotateTimer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-gcTimer.C():
			if err := c.CollectContainers(ctx, podActive); err != nil && ctx.Err() == nil {
				c.log.Warn("container garbage collection failed", "err", err)
			}
			gcTimer.Reset(period)
		case <-rotateTimer.C():
			if err := c.RotateLogs(ctx); err != nil && ctx.Err() == nil {
				c.log.Warn("container log rotation failed", "err", err)
			}
			rotateTimer.Reset(rotate)
		}
	}
}
