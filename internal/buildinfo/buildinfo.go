// Package buildinfo reports the version of this binary: set with -ldflags "-X .../buildinfo.version=v1.2.3" by
// `make build`, otherwise taken from the Go module build information.
package buildinfo

import (
	"runtime"
	"runtime/debug"
)

// version is set by the linker.
var version = ""

// Version returns the IRS version ("devel" when unknown).
func Version() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			return bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				return "devel-" + s.Value[:12]
			}
		}
	}
	return "devel"
}

// GoVersion returns the Go version the binary was built with.
func GoVersion() string { return runtime.Version() }
