package localnet

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
)

// Exec runs the iptables on PATH: iptables-nft on Debian 12 and most
// current distributions (the rules are then nftables rules in table ip
// filter), iptables-legacy where that is the system's choice. It is the
// same command a kubelet on the machine runs, so both find the same rules.
type Exec struct{}

// Run runs iptables with args; the error of a failed command wraps its
// *exec.ExitError and says what iptables printed.
func (Exec) Run(ctx context.Context, args ...string) ([]byte, error) {
	path, err := exec.LookPath("iptables")
	if err != nil {
		return nil, fmt.Errorf("find iptables: %w", err)
	}
	out, err := exec.CommandContext(ctx, path, args...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%w: %s", err, bytes.TrimSpace(out))
	}
	return out, nil
}
