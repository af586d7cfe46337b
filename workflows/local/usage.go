package local

import (
	"time"

	"github.com/irs-sim/irs/workflows"
	"github.com/prometheus/procfs"
)

// Usage implements workflows.Backend.
func (b *Backend) Usage() []workflows.Usage {
	b.mu.Lock()
	var rs []*replica
	for _, name := range b.order {
		for _, r := range b.services[name].replicas {
			if r.alive() {
				rs = append(rs, r)
			}
		}
	}
	cp := 0
	if b.mesh != nil && b.mesh.cp != nil && b.mesh.cp.Process != nil {
		cp = b.mesh.cp.Process.Pid
	}
	b.mu.Unlock()
	out := make([]workflows.Usage, 0, 2*len(rs)+1)
	add := func(pid int, service, replica, kind string) {
		p, err := procfs.NewProc(pid)
		if err != nil {
			return
		}
		st, err := p.Stat()
		if err != nil {
			return // exited just now
		}
		out = append(out, workflows.Usage{Service: service, Replica: replica, Kind: kind, At: time.Now(),
			CPUSeconds: cpuSeconds(pid, st), RSSBytes: int64(st.ResidentMemory())})
	}
	for _, r := range rs {
		add(r.pid, r.svc.spec.Name, r.id, workflows.UsageWorker)
		if sc := r.proxy(); sc != nil {
			add(sc.pid, r.svc.spec.Name, r.id, workflows.UsageSidecar)
		}
	}
	if cp != 0 {
		add(cp, "", "control-plane", workflows.UsageControlPlane)
	}
	return out
}

// cpuSeconds returns a process's CPU time: the sum of its threads' run time in nanoseconds from
// /proc/PID/task/*/schedstat, where /proc/PID/stat counts in clock ticks (10 ms), too coarse for a worker that
// uses 20 millicores. Threads that ended take their time with them, so the tick count, which keeps it, is the
// floor.
func cpuSeconds(pid int, st procfs.ProcStat) float64 {
	ticks := st.CPUTime()
	threads, err := procfs.AllThreads(pid)
	if err != nil {
		return ticks
	}
	var ns uint64
	for _, t := range threads {
		if ss, err := t.Schedstat(); err == nil {
			ns += ss.RunningNanoseconds
		}
	}
	return max(float64(ns)/1e9, ticks)
}
