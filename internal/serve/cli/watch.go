package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
)

// DefaultWatchInterval is WatchPods' poll interval when it is given 0.
const DefaultWatchInterval = 2 * time.Second

// WatchPods is `get pods -w`: it prints the pods as PrintPods does, then
// polls /pods every interval and prints the pods that changed since the
// poll before, as kubectl prints watch events. In the table formats a pod
// that went away is printed once more with the status Deleted; in yaml and
// json it is not printed. Polling stops when ctx ends, which returns nil;
// a failed poll returns its error.
func WatchPods(ctx context.Context, c *Client, w io.Writer, interval time.Duration, format string) error {
	return watchPods(ctx, c.Pods, w, interval, format, time.Now)
}

// watcher remembers what it printed of each pod.
type watcher struct {
	w      io.Writer
	format string
	now    func() time.Time
	table  *podTable
	// namespace is the only namespace of the first poll, when the table
	// has no NAMESPACE column; pods of other namespaces are named
	// namespace/name.
	namespace string
	printed   int
	last      map[string]watched
}

type watched struct {
	fingerprint string
	row         podRow
}

func watchPods(ctx context.Context, list func(context.Context) ([]v1.Pod, error), w io.Writer,
	interval time.Duration, format string, now func() time.Time) error {
	if err := checkFormat(format); err != nil {
		return err
	}
	if interval <= 0 {
		interval = DefaultWatchInterval
	}
	wa := &watcher{w: w, format: format, now: now, last: map[string]watched{}}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for first := true; ; first = false {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		pods, err := list(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if err := wa.print(pods, first); err != nil {
			return err
		}
		timer.Reset(interval)
	}
}

// print writes the pods that are new or changed, then the ones gone.
func (wa *watcher) print(pods []v1.Pod, first bool) error {
	pods = slices.Clone(pods)
	slices.SortStableFunc(pods, func(a, b v1.Pod) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	table := wa.format == FormatTable || wa.format == FormatWide
	if first && table {
		many := manyNamespaces(pods)
		wa.table = newPodTable(wa.format == FormatWide, many)
		if !many && len(pods) > 0 {
			wa.namespace = pods[0].Namespace
		}
	}
	now := wa.now()
	seen := map[string]bool{}
	for i := range pods {
		pod := &pods[i]
		key := pod.Namespace + "/" + pod.Name
		seen[key] = true
		row := rowOf(pod)
		if table && !wa.table.namespace && pod.Namespace != wa.namespace {
			row.Name = key
		}
		fp, err := wa.fingerprint(pod, row)
		if err != nil {
			return err
		}
		if prev, ok := wa.last[key]; ok && prev.fingerprint == fp {
			continue
		}
		wa.last[key] = watched{fingerprint: fp, row: row}
		if table {
			wa.table.add(row, now)
			continue
		}
		if err := wa.object(withKind(*pod)); err != nil {
			return err
		}
	}
	for _, key := range slices.Sorted(maps.Keys(wa.last)) {
		if seen[key] {
			continue
		}
		if table {
			row := wa.last[key].row
			row.Status = "Deleted"
			wa.table.add(row, now)
		}
		delete(wa.last, key)
	}
	if table {
		return wrapWrite(wa.table.flush(wa.w, first))
	}
	return nil
}

// fingerprint is what must change for a pod to be printed again: its row
// in the table formats (ages aside), the whole object otherwise.
func (wa *watcher) fingerprint(pod *v1.Pod, row podRow) (string, error) {
	if wa.format == FormatTable || wa.format == FormatWide {
		return fmt.Sprintf("%#v", row), nil
	}
	b, err := json.Marshal(pod)
	if err != nil {
		return "", fmt.Errorf("encode pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return string(b), nil
}

// object prints one pod as a YAML document or a JSON object.
func (wa *watcher) object(pod v1.Pod) error {
	if wa.format == FormatYAML && wa.printed > 0 {
		if _, err := io.WriteString(wa.w, "---\n"); err != nil {
			return wrapWrite(err)
		}
	}
	wa.printed++
	return printObject(wa.w, &pod, wa.format)
}
