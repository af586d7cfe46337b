package campaign

import (
	"os"
	"runtime"
	"strings"

	"github.com/irs-sim/irs/internal/buildinfo"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"golang.org/x/sys/unix"
)

// Environment describes this machine, and the backend named, for a result.
func Environment(backend string) *irsv1.Environment {
	env := &irsv1.Environment{IrsVersion: buildinfo.Version(), GoVersion: runtime.Version(), Os: runtime.GOOS,
		Arch: runtime.GOARCH, Cpus: int32(runtime.NumCPU()), Backend: backend}
	env.Hostname, _ = os.Hostname()
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		env.Kernel = strings.TrimRight(string(u.Release[:]), "\x00")
	}
	return env
}
