package local

import (
	"runtime"
	"sync"
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
		if u, ok := b.readProcess(pid); ok {
			u.Service, u.Replica, u.Kind = service, replica, kind
			out = append(out, u)
		}
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

// readProcess reads a live process's CPU time, memory and start time; not ok once it has exited, or was killed
// and is not reaped yet: a zombie's threads are gone, and so is most of what its counter summed.
func (b *Backend) readProcess(pid int) (workflows.Usage, bool) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return workflows.Usage{}, false
	}
	st, err := p.Stat()
	if err != nil || st.State == "Z" || st.State == "X" {
		return workflows.Usage{}, false
	}
	u := workflows.Usage{At: time.Now(), CPUSeconds: cpuSeconds(pid, st), RSSBytes: int64(st.ResidentMemory()),
		Cores: float64(runtime.NumCPU())}
	if boot, ok := b.bootTime(); ok {
		u.Started = boot.Add(time.Duration(st.Starttime) * time.Second / userHZ)
	}
	return u, true
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

// userHZ is the unit of /proc/PID/stat's times (clock ticks): 100 a second on every Linux that IRS runs on
// (procfs assumes the same).
const userHZ = 100

// bootClock reads the machine's boot time once (/proc/stat's btime): a process's start time is counted from it.
type bootClock struct {
	once sync.Once
	at   time.Time
	ok   bool
}

// bootTime returns when the machine booted, and whether it could be read.
func (b *Backend) bootTime() (time.Time, bool) {
	b.boot.once.Do(func() {
		fs, err := procfs.NewDefaultFS()
		if err != nil {
			return
		}
		st, err := fs.Stat()
		if err != nil {
			return
		}
		b.boot.at, b.boot.ok = time.Unix(int64(st.BootTime), 0), true
	})
	return b.boot.at, b.boot.ok
}
