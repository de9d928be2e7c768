package containerd

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/nodelet/nodelet/internal/base/atomicfile"
	"github.com/nodelet/nodelet/internal/base/bounded"
	"github.com/nodelet/nodelet/internal/pure/podnet"
)

// BridgeConfName is the file name of nodelet's bridge network in the CNI
// configuration directory.
const BridgeConfName = "10-nodelet.conflist"

// maxConfBytes bounds what nodelet reads of a network configuration.
const maxConfBytes = 1 << 20

// RenderBridge is nodelet's bridge network for the pod CIDRs (one, or two
// of different families: dual-stack, the primary first): the bridge
// plugin as the gateway with masquerading, host-local IPAM with a range
// and a default route per family, and portmap for hostPort. It is pure.
func RenderBridge(c Config, cidrs []string) ([]byte, error) {
	prefixes, err := podnet.ParsePodCIDRs(cidrs)
	if err != nil {
		return nil, err
	}
	type obj = map[string]any
	var ranges, routes []any
	for _, p := range prefixes {
		ranges = append(ranges, []any{obj{"subnet": p.String()}})
		dst := "0.0.0.0/0"
		if p.Addr().Is6() {
			dst = "::/0"
		}
		routes = append(routes, obj{"dst": dst})
	}
	conf := obj{
		"cniVersion": "1.0.0",
		"name":       "nodelet",
		"plugins": []any{
			obj{
				"type":        "bridge",
				"bridge":      c.BridgeName,
				"isGateway":   true,
				"ipMasq":      true,
				"hairpinMode": true,
				"ipam": obj{
					"type":    "host-local",
					"ranges":  ranges,
					"routes":  routes,
					"dataDir": c.ipamDataDir(),
				},
			},
			obj{"type": "portmap", "capabilities": obj{"portMappings": true}, "snat": true},
		},
	}
	b, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("render CNI config: %w", err)
	}
	return append(b, '\n'), nil
}

// bridgeRecord is what nodelet last wrote as its bridge network.
type bridgeRecord struct {
	PodCIDRs []string `json:"podCIDRs"`
	SHA256   string   `json:"sha256"`
}

// BridgeOutcome says what WriteBridge did.
type BridgeOutcome int

const (
	// BridgeWritten: the bridge network now has the pod CIDRs asked for.
	BridgeWritten BridgeOutcome = iota
	// BridgeUnchanged: it already had them.
	BridgeUnchanged
	// BridgeForeign: the directory holds a network configuration nodelet
	// did not write; nothing was written, containerd uses that one.
	BridgeForeign
)

// WriteBridge writes nodelet's bridge network for cidrs into the CNI
// configuration directory, only when the directory holds no network
// configuration (.conf, .conflist, .json, as libcni reads) other than
// one nodelet wrote itself: its own file, with the bytes its record says
// it wrote (or exactly the bytes it would write now). A configuration of
// anyone else, including a file of nodelet's name that someone changed,
// is never replaced: the outcome is BridgeForeign and its name is in the
// error-free detail. The file is replaced atomically, the record after it.
func WriteBridge(c Config, cidrs []string) (BridgeOutcome, string, error) {
	data, err := RenderBridge(c, cidrs)
	if err != nil {
		return 0, "", err
	}
	dir := c.ConfDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, "", fmt.Errorf("create the CNI configuration directory: %w", err)
	}
	if foreign, err := foreignConf(dir); err != nil || foreign != "" {
		return BridgeForeign, foreign, err
	}
	current, err := bounded.ReadFile(c.BridgeConfPath(), maxConfBytes)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return 0, "", fmt.Errorf("read %s: %w", c.BridgeConfPath(), err)
	case bytes.Equal(current, data):
		return BridgeUnchanged, "", writeRecord(c, cidrs, data)
	case !wroteLast(c, current):
		return BridgeForeign, c.BridgeConfPath(), nil
	}
	if err := atomicfile.Write(c.BridgeConfPath(), data, 0o644); err != nil {
		return 0, "", fmt.Errorf("write the bridge network: %w", err)
	}
	return BridgeWritten, "", writeRecord(c, cidrs, data)
}

// BridgePodCIDRs are the pod CIDRs of the bridge network nodelet last
// wrote, when its file still holds what nodelet wrote; nil otherwise.
func BridgePodCIDRs(c Config) []string {
	rec, ok := readRecord(c)
	if !ok {
		return nil
	}
	current, err := bounded.ReadFile(c.BridgeConfPath(), maxConfBytes)
	if err != nil || digest(current) != rec.SHA256 {
		return nil
	}
	return rec.PodCIDRs
}

// foreignConf is the first network configuration in dir that is not
// nodelet's file; "" when there is none. As containerd finds networks
// (go-cni: libcni.ConfFiles, then sorted): every file, hidden ones
// included, whose extension is one of libcni's. A hidden one even sorts
// before nodelet's, so containerd would use it. nodelet's own temp files
// (atomicfile: .tmp-<name>-<random>) have no such extension.
func foreignConf(dir string) (string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", fmt.Errorf("read the CNI configuration directory: %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		if name == BridgeConfName || e.IsDir() {
			continue
		}
		if slices.Contains([]string{".conf", ".conflist", ".json"}, filepath.Ext(name)) {
			return filepath.Join(dir, name), nil
		}
	}
	return "", nil
}

func wroteLast(c Config, current []byte) bool {
	rec, ok := readRecord(c)
	return ok && digest(current) == rec.SHA256
}

func readRecord(c Config) (bridgeRecord, bool) {
	var rec bridgeRecord
	data, err := bounded.ReadFile(c.bridgeRecord(), 64<<10)
	if err != nil || json.Unmarshal(data, &rec) != nil || rec.SHA256 == "" {
		return bridgeRecord{}, false
	}
	return rec, true
}

func writeRecord(c Config, cidrs []string, data []byte) error {
	b, err := json.Marshal(bridgeRecord{PodCIDRs: cidrs, SHA256: digest(data)})
	if err != nil {
		return err
	}
	if err := writeAtomic(c.bridgeRecord(), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("record the bridge network: %w", err)
	}
	return nil
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
