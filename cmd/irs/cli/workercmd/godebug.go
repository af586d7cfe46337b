package workercmd

import "strings"

// sysmonSetting keeps the Go runtime's monitor thread (sysmon) out of its idle sleep.
//
// Why: every system call made while sysmon sleeps (all processors idle) wakes it and resets its poll interval
// to 20 µs, and it polls at that pace for as long as any goroutine runs. A worker that burns 2 ms of CPU per
// request therefore wakes sysmon ~25 times per request; on a 2-vCPU VM this cost the worker process 15-18 %
// more CPU than the work it was configured to do (measured: 475 instead of 400 mcores at 200 rps × 2 ms).
// Any positive schedtrace stops sysmon from sleeping, so it backs off to 10 ms polls and stays there (4 mcores
// when idle, measured); the largest value means the trace itself prints only if the host has been up for more
// than 24.8 days, once at start, then every 24.8 days.
const sysmonSetting = "schedtrace=2147483647"

// ReexecEnv returns the environment to re-execute a worker's process with, and whether to do so: GODEBUG
// gains sysmonSetting unless it already sets schedtrace (the user's choice wins). GODEBUG is read only at
// process start, hence the re-execution.
func ReexecEnv(environ []string) ([]string, bool) {
	out := make([]string, 0, len(environ)+1)
	found := false
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, "GODEBUG="); ok {
			if strings.Contains(v, "schedtrace=") {
				return nil, false
			}
			found = true
			if v != "" {
				v += ","
			}
			kv = "GODEBUG=" + v + sysmonSetting
		}
		out = append(out, kv)
	}
	if !found {
		out = append(out, "GODEBUG="+sysmonSetting)
	}
	return out, true
}
