package workflows

import (
	"fmt"
	"strings"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
)

// DescribeLink says what a link action does, for the run's events: "irs-node-2 ↔ every node: delay 300us".
func DescribeLink(a *irsv1.LinkAction) string {
	where := "every pair of nodes"
	if len(a.GetNodes()) > 0 {
		where = strings.Join(a.GetNodes(), ", ") + " ↔ every other node"
	}
	if a.GetReset_() {
		return where + ": the links the run started with"
	}
	return where + ": " + DescribeLinkSettings(a.GetSet())
}

// DescribeLinkSettings says what a link is: "delay 300us ± 50us, loss 0.1%, 1G", or "a plain wire".
func DescribeLinkSettings(l *irsv1.Link) string {
	var parts []string
	if l.GetDelay() != "" {
		d := "delay " + l.GetDelay()
		if l.GetJitter() != "" {
			d += " ± " + l.GetJitter()
		}
		parts = append(parts, d)
	} else if l.GetJitter() != "" {
		parts = append(parts, "jitter "+l.GetJitter())
	}
	if l.GetLoss() != "" {
		parts = append(parts, "loss "+l.GetLoss())
	}
	if l.GetRate() != "" {
		parts = append(parts, l.GetRate()+"bit/s")
	}
	if len(parts) == 0 {
		return "a plain wire"
	}
	return strings.Join(parts, ", ")
}

// DescribePartition says what a partition action does: "irs-node-2 | irs-node-3" or "heal".
func DescribePartition(a *irsv1.PartitionAction) string {
	if a.GetHeal() {
		return "every partition healed"
	}
	other := "every other node"
	if len(a.GetFrom()) > 0 {
		other = strings.Join(a.GetFrom(), ", ")
	}
	return fmt.Sprintf("%s cut off from %s", strings.Join(a.GetNodes(), ", "), other)
}
