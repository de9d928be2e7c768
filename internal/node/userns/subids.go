package userns

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
)

// unit is the length every per-pod block and the node's range are
// multiples of (the kubelet's userNsUnitLength): one user namespace of the
// usual 16-bit IDs.
const unit = 65536

// DefaultIDsPerPod is the kubelet's default userNamespaces.idsPerPod.
const DefaultIDsPerPod = unit

// MaxSubIDFile bounds what ParseSubIDs reads of /etc/subuid or
// /etc/subgid; the caller reads at most this much.
const MaxSubIDFile = 1 << 20

// Range is the host IDs the pods' user namespaces are cut from: First to
// First+Length-1, the same for UIDs and GIDs.
type Range struct {
	First, Length uint32
}

// DefaultRange is the kubelet's range when the node has no "kubelet" user
// (or that user has no subordinate IDs tool): every ID from idsPerPod up,
// so that no pod ever maps the host's IDs below idsPerPod (root among
// them).
func DefaultRange(idsPerPod uint32) Range {
	return Range{First: idsPerPod, Length: uint32(1<<32 - uint64(idsPerPod))}
}

// KubeletUser is the node's "kubelet" user, whose subordinate IDs are the
// pods' range as the kubelet's getKubeletMappings takes them: one entry
// for the user in /etc/subuid, the same one in /etc/subgid.
type KubeletUser struct {
	// Name and UID identify the user; an entry names either.
	Name, UID string
	// SubUID and SubGID are the contents of /etc/subuid and /etc/subgid
	// (nil: the file is missing), at most MaxSubIDFile bytes each.
	SubUID, SubGID []byte
}

// rangeOf is u's range: its one entry in /etc/subuid, which /etc/subgid
// must repeat.
func (u *KubeletUser) rangeOf() (Range, error) {
	uids, err := ParseSubIDs(u.SubUID, u.Name, u.UID)
	if err != nil {
		return Range{}, fmt.Errorf("/etc/subuid: %w", err)
	}
	gids, err := ParseSubIDs(u.SubGID, u.Name, u.UID)
	if err != nil {
		return Range{}, fmt.Errorf("/etc/subgid: %w", err)
	}
	if uids != gids {
		return Range{}, fmt.Errorf("user %q has subordinate UIDs %d-%d but GIDs %d-%d: they must be the same",
			u.Name, uids.First, uint64(uids.First)+uint64(uids.Length)-1, gids.First, uint64(gids.First)+uint64(gids.Length)-1)
	}
	return uids, nil
}

// errNoEntry is a subordinate ID file without an entry for the user.
var errNoEntry = errors.New("no entry")

// ParseSubIDs is the one range data (the contents of /etc/subuid or
// /etc/subgid: lines "owner:first:count") gives the user called name, or
// of UID uid: exactly one entry must name it (the kubelet takes exactly
// one line of getsubids). Blank lines and lines starting with "#" are
// skipped; any other line must be well formed, with first and count
// unsigned 32-bit numbers, count positive and the range within 32 bits.
// More than MaxSubIDFile bytes is an error.
func ParseSubIDs(data []byte, name, uid string) (Range, error) {
	if len(data) > MaxSubIDFile {
		return Range{}, fmt.Errorf("larger than %d bytes", MaxSubIDFile)
	}
	var found []Range
	for n, line := range bytes.Split(data, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		owner, r, err := parseSubIDLine(line)
		if err != nil {
			return Range{}, fmt.Errorf("line %d: %w", n+1, err)
		}
		if owner == name || (uid != "" && owner == uid) {
			found = append(found, r)
		}
	}
	switch len(found) {
	case 0:
		return Range{}, fmt.Errorf("%w for user %q", errNoEntry, name)
	case 1:
		return found[0], nil
	}
	return Range{}, fmt.Errorf("%d entries for user %q: want exactly one", len(found), name)
}

// parseSubIDLine parses "owner:first:count".
func parseSubIDLine(line []byte) (string, Range, error) {
	fields := bytes.Split(line, []byte(":"))
	if len(fields) != 3 || len(fields[0]) == 0 {
		return "", Range{}, fmt.Errorf("%q: want owner:first:count", truncate(line))
	}
	first, err := strconv.ParseUint(string(fields[1]), 10, 32)
	if err != nil {
		return "", Range{}, fmt.Errorf("%q: first ID: want a number below 2^32", truncate(line))
	}
	count, err := strconv.ParseUint(string(fields[2]), 10, 32)
	if err != nil || count == 0 {
		return "", Range{}, fmt.Errorf("%q: count: want a positive number below 2^32", truncate(line))
	}
	if first+count > 1<<32 {
		return "", Range{}, fmt.Errorf("%q: the range ends past 2^32", truncate(line))
	}
	return string(fields[0]), Range{First: uint32(first), Length: uint32(count)}, nil
}

// truncate shortens a line for an error message.
func truncate(b []byte) string {
	if len(b) > 64 {
		return string(b[:61]) + "..."
	}
	return string(b)
}

// checkRange applies the kubelet's rules (MakeUserNsManager) to the
// node's range r for blocks of idsPerPod and maxPods pods.
func checkRange(r Range, idsPerPod uint32, maxPods int) error {
	if idsPerPod == 0 || idsPerPod%unit != 0 {
		return fmt.Errorf("userNamespaces.idsPerPod %d is not a positive multiple of %d", idsPerPod, unit)
	}
	if r.First%idsPerPod != 0 {
		return fmt.Errorf("the first ID %d is not a multiple of idsPerPod %d", r.First, idsPerPod)
	}
	if r.First < idsPerPod {
		// A pod must never map the host's root.
		return fmt.Errorf("the first ID %d must be at least idsPerPod %d", r.First, idsPerPod)
	}
	if r.Length%idsPerPod != 0 {
		return fmt.Errorf("the range length %d is not a multiple of idsPerPod %d", r.Length, idsPerPod)
	}
	if uint64(r.First)+uint64(r.Length) > 1<<32 {
		return fmt.Errorf("the range %d+%d ends past 2^32", r.First, r.Length)
	}
	if blocks := r.Length / idsPerPod; uint64(blocks) < uint64(max(maxPods, 0)) {
		return fmt.Errorf("the range of %d IDs holds %d pods of %d IDs, fewer than maxPods %d", r.Length, blocks, idsPerPod, maxPods)
	}
	return nil
}
