package ambient

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	zdspb "github.com/irs-sim/irs/proto/ztunnel/zds"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/encoding/protojson"
)

// podRecord is what the agent keeps of an enrolled pod in its state directory, so that an agent started again
// (its container restarted) still hands ztunnel every pod: the pods enrol once, at their start.
type podRecord struct {
	// Inode is the pod's network namespace: the agent opens it again from a process that is in it.
	Inode uint64          `json:"inode"`
	Add   json.RawMessage `json:"add"` // the AddWorkload, protojson
}

func recordPath(dir, uid string) string { return filepath.Join(dir, uid+".json") }

// saveRecord writes w's record into dir (nothing when dir is "").
func saveRecord(dir string, w *podNetns) error {
	if dir == "" {
		return nil
	}
	add, err := protojson.Marshal(w.add)
	if err != nil {
		return fmt.Errorf("record pod %s: %w", w.add.GetUid(), err)
	}
	b, err := json.Marshal(podRecord{Inode: w.inode, Add: add})
	if err != nil {
		return fmt.Errorf("record pod %s: %w", w.add.GetUid(), err)
	}
	path := recordPath(dir, w.add.GetUid())
	// Written whole, then renamed: an agent killed while writing leaves the old record or none.
	if err := os.WriteFile(path+".tmp", b, 0o600); err != nil {
		return fmt.Errorf("record pod %s: %w", w.add.GetUid(), err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		return fmt.Errorf("record pod %s: %w", w.add.GetUid(), err)
	}
	return nil
}

// dropRecord removes uid's record from dir (nothing when dir is "").
func dropRecord(dir, uid string) error {
	if dir == "" {
		return nil
	}
	if err := os.Remove(recordPath(dir, uid)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("forget pod %s: %w", uid, err)
	}
	return nil
}

// loadRecords returns the pods recorded in dir whose network namespace some process on the node is still in,
// each with that namespace open; it removes the records of the others, and reports records it cannot read.
func loadRecords(dir string) ([]*podNetns, []error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, []error{fmt.Errorf("read the agent's state: %w", err)}
	}
	var pods []*podNetns
	var errs []error
	var inNetns map[uint64]int
	for _, e := range entries {
		uid, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok {
			continue
		}
		path := filepath.Join(dir, e.Name())
		w, err := readRecord(path, uid)
		if err != nil {
			errs = append(errs, err)
			_ = os.Remove(path)
			continue
		}
		if inNetns == nil {
			if inNetns, err = processInNetns(); err != nil {
				return nil, append(errs, err)
			}
		}
		pid, ok := inNetns[w.inode]
		if !ok { // the pod ended while no agent ran
			_ = os.Remove(path)
			continue
		}
		f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/ns/net")
		var st unix.Stat_t
		if err == nil && unix.Fstat(int(f.Fd()), &st) == nil && st.Ino == w.inode {
			w.netns = f
			pods = append(pods, w)
			continue
		}
		if f != nil {
			_ = f.Close()
		}
		_ = os.Remove(path) // the process left (and with it, most likely, the pod) while we looked
	}
	return pods, errs
}

func readRecord(path, uid string) (*podNetns, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("pod record %s: %w", path, err)
	}
	var rec podRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("pod record %s: %w", path, err)
	}
	add := &zdspb.AddWorkload{}
	if err := protojson.Unmarshal(rec.Add, add); err != nil {
		return nil, fmt.Errorf("pod record %s: add: %w", path, err)
	}
	if add.GetUid() != uid || rec.Inode == 0 {
		return nil, fmt.Errorf("pod record %s: uid %q, inode %d: not this pod's", path, add.GetUid(), rec.Inode)
	}
	return &podNetns{add: add, inode: rec.Inode, acked: make(chan error, 1)}, nil
}
