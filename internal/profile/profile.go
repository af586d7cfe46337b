// Package profile writes a process's CPU and heap profiles, for go tool pprof: how a command's own cost is
// found before it is changed.
package profile

import (
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
)

// Start profiles the CPU into cpuPath from now until stop, and at stop writes the heap into heapPath. An
// empty path is not written, nor one that exists: a profile is never overwritten.
func Start(cpuPath, heapPath string) (stop func()) {
	cpu := create(cpuPath)
	if cpu != nil && pprof.StartCPUProfile(cpu) != nil { // another profile runs already
		_ = cpu.Close()
		cpu = nil
	}
	return func() {
		if cpu != nil {
			pprof.StopCPUProfile()
			_ = cpu.Close()
		}
		if heap := create(heapPath); heap != nil {
			_ = pprof.Lookup("heap").WriteTo(heap, 0)
			_ = heap.Close()
		}
	}
}

func create(path string) *os.File {
	if path == "" {
		return nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil
	}
	return f
}

// FromEnv is Start with the paths $IRS_CPUPROFILE and $IRS_MEMPROFILE name, for irs and irs-worker alike: "%p" in
// a path is the process id, so that each of a run's processes, which inherit the variables, writes its own.
func FromEnv() (stop func()) {
	path := func(env string) string {
		return strings.ReplaceAll(os.Getenv(env), "%p", strconv.Itoa(os.Getpid()))
	}
	return Start(path("IRS_CPUPROFILE"), path(EnvMemProfile))
}

// EnvMemProfile names the file FromEnv writes the heap profile into.
const EnvMemProfile = "IRS_MEMPROFILE"

// SampleHeapOnlyIfAsked turns the runtime's heap sampling off unless a heap profile is asked for: by
// EnvMemProfile, or by one of the variables alsoAskedBy names. Left on (a sample every 512 KiB allocated), the
// runtime keeps a record for every distinct stack it samples, in a 1.4 MB table whose pages are touched as
// records land in them: a long-running process's resident memory climbed with a profile nobody would read.
// Called first thing in main: what the packages' initialization allocated may have been sampled already,
// nothing after is.
func SampleHeapOnlyIfAsked(alsoAskedBy ...string) {
	for _, env := range append([]string{EnvMemProfile}, alsoAskedBy...) {
		if os.Getenv(env) != "" {
			return
		}
	}
	runtime.MemProfileRate = 0
}
