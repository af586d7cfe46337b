// Command coredns is CoreDNS with only the plugins the test cluster's DNS needs: Service and Pod names from the
// API server, and nothing forwarded (no query leaves the machine). Built by ../build.sh from the Go module proxy.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/template"
)

// The order plugins run in, as in CoreDNS's plugin.cfg (a custom build names its own).
func init() {
	dnsserver.Directives = []string{"errors", "health", "ready", "cache", "template", "kubernetes"}
}

func main() { coremain.Run() }
