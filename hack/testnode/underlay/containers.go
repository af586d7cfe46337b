package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// containers serves ContainerFaultService: it finds a container by its id in the cgroups of the test cluster's
// nodes (each kubelet's cgroup root is /irs-node-<i>), and signals or freezes its processes there.
type containers struct {
	irsv1.UnimplementedContainerFaultServiceServer
	// root is the cgroup file system (/sys/fs/cgroup).
	root string
}

// containerID is a container's id as the CRI gives it: 64 hex digits.
var containerID = regexp.MustCompile(`^[0-9a-f]{64}$`)

func parseContainerID(s string) (string, error) {
	id := s
	if _, rest, ok := strings.Cut(s, "://"); ok {
		id = rest
	}
	if !containerID.MatchString(id) {
		return "", status.Errorf(codes.InvalidArgument, "container_id: %q is not a container id (containerd://<64 hex digits>)", s)
	}
	return id, nil
}

// find returns the container's cgroup directory in a hierarchy ("" for the unified one, else a v1 controller
// such as "freezer"), and its node.
func (c *containers) find(hierarchy, id string) (dir, node string, err error) {
	base := filepath.Join(c.root, hierarchy)
	for _, pattern := range []string{"irs-node-*/kubepods/*/pod*/" + id, "irs-node-*/kubepods/pod*/" + id} {
		matches, _ := filepath.Glob(filepath.Join(base, pattern))
		if len(matches) == 1 {
			rel, _ := filepath.Rel(base, matches[0])
			return matches[0], strings.SplitN(rel, string(filepath.Separator), 2)[0], nil
		}
	}
	return "", "", status.Errorf(codes.NotFound, "no container %s on the test cluster's nodes", id)
}

func (c *containers) v2() bool {
	_, err := os.Stat(filepath.Join(c.root, "cgroup.controllers"))
	return err == nil
}

func (c *containers) KillContainer(ctx context.Context, r *irsv1.KillContainerRequest) (*irsv1.KillContainerResponse, error) {
	id, err := parseContainerID(r.GetContainerId())
	if err != nil {
		return nil, err
	}
	hierarchy := "pids"
	if c.v2() {
		hierarchy = ""
	}
	dir, node, err := c.find(hierarchy, id)
	if err != nil {
		return nil, err
	}
	// A frozen process dies only once thawed: thaw first, so that the kill is the crash it stands for.
	if _, err := c.freeze(ctx, id, false); err != nil {
		return nil, err
	}
	pids, err := readPids(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil, status.Errorf(codes.Internal, "container %s: %v", id, err)
	}
	n := 0
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGKILL); err == nil {
			n++
		}
	}
	return &irsv1.KillContainerResponse{Done: &irsv1.ContainerFault{Processes: int32(n), Node: node}}, nil
}

func (c *containers) FreezeContainer(ctx context.Context, r *irsv1.FreezeContainerRequest) (*irsv1.FreezeContainerResponse, error) {
	id, err := parseContainerID(r.GetContainerId())
	if err != nil {
		return nil, err
	}
	done, err := c.freeze(ctx, id, r.GetFrozen())
	if err != nil {
		return nil, err
	}
	return &irsv1.FreezeContainerResponse{Done: done}, nil
}

// freeze freezes or thaws a container's processes and waits (within 5 s) until the kernel says it is done.
func (c *containers) freeze(ctx context.Context, id string, frozen bool) (*irsv1.ContainerFault, error) {
	v2 := c.v2()
	hierarchy, file, value, done := "freezer", "freezer.state", "THAWED", "THAWED"
	if frozen {
		value, done = "FROZEN", "FROZEN"
	}
	if v2 {
		hierarchy, file, value, done = "", "cgroup.freeze", "0", "0"
		if frozen {
			value, done = "1", "1"
		}
	}
	dir, node, err := c.find(hierarchy, id)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, file), []byte(value), 0); err != nil {
		return nil, status.Errorf(codes.Internal, "container %s: %v", id, err)
	}
	state := filepath.Join(dir, file)
	if v2 {
		state = filepath.Join(dir, "cgroup.events") // "frozen 0|1"
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, err := os.ReadFile(state)
		if err != nil {
			return nil, status.Errorf(codes.Internal, "container %s: %v", id, err)
		}
		s := strings.TrimSpace(string(b))
		if (!v2 && s == done) || (v2 && strings.Contains(s, "frozen "+done)) {
			break
		}
		if time.Now().After(deadline) {
			return nil, status.Errorf(codes.DeadlineExceeded, "container %s: still %q after 5 s", id, s)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	pids, _ := readPids(filepath.Join(dir, "cgroup.procs"))
	return &irsv1.ContainerFault{Processes: int32(len(pids)), Node: node}, nil
}

func readPids(path string) ([]int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []int
	for f := range strings.FieldsSeq(string(b)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			return nil, errors.New("unreadable " + path)
		}
		out = append(out, pid)
	}
	return out, nil
}
