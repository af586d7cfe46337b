// Command gatejudge reads the A/B gates made by bench/verdicts/run.sh gate and prints, per kind of gate (an A/A
// gate of unchanged code, and each real change), how often it passed, regressed or stayed inconclusive, the runs
// a side it took, and what held the undecided ones back: the table of docs/reports.md.
//
// It decides each gate again from its runs, look by look in the order they ran, with this tree's
// baseline.Gate (not the verdict the binary that ran it wrote): a change to the statistics is judged on the
// same runs. A gate whose recorded runs end before this code would decide, within the budget, is counted as
// "runs missing" (the binary that made it stopped earlier).
//
//	go run ./bench/verdicts/gatejudge DIR
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows/baseline"
	"github.com/irs-sim/irs/workflows/resultfile"
)

// cases are the kinds of gate, by the suffix of their run directory, with what each should decide.
var cases = []struct{ suffix, name, want string }{
	{"chain", "unchanged code (A/A)", "passed"},
	{"errors", "+1 pp of 503 at the deepest tier", "regressed"},
	{"slow", "+20 % delay at the deepest tier", "regressed"},
	{"stall", "one replica 4x slower for 5 s of 40", "regressed"},
	{"cpu", "+30 % CPU cost at the middle tier", "regressed"},
}

type tally struct {
	gates, passed, regressed, inconclusive, runs int
	missing                                      int            // replays that ran out of recorded runs
	minutes                                      float64        // wall time of the runs a decision took
	other                                        []string       // gates that ended without a verdict (error, interrupted)
	holding                                      map[string]int // what kept undecided gates from deciding
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: gatejudge DIR")
		os.Exit(2)
	}
	dirs, err := filepath.Glob(filepath.Join(os.Args[1], "*-*", "comparison.json"))
	if err != nil || len(dirs) == 0 {
		fmt.Fprintln(os.Stderr, "gatejudge: no gate in", os.Args[1])
		os.Exit(1)
	}
	tallies := map[string]*tally{}
	for _, path := range dirs {
		suffix := filepath.Base(filepath.Dir(path))
		suffix = suffix[strings.LastIndex(suffix, "-")+1:]
		t := tallies[suffix]
		if t == nil {
			t = &tally{holding: map[string]int{}}
			tallies[suffix] = t
		}
		f, err := resultfile.Read(context.Background(), path)
		if err != nil || f.Comparison == nil {
			t.other = append(t.other, fmt.Sprintf("%s: %v", path, err))
			continue
		}
		reg, missing := replay(f.Comparison)
		if reg == nil {
			t.other = append(t.other, fmt.Sprintf("%s: %s, no gate: %s", path, f.Comparison.GetStatus(), missing))
			continue
		}
		if missing != "" {
			t.missing++
			continue
		}
		t.gates++
		t.runs += int(reg.GetSequential().GetRuns())
		t.minutes += gateMinutes(f.Comparison, int(reg.GetSequential().GetRuns()))
		switch reg.GetStatus() {
		case "passed":
			t.passed++
		case "regressed":
			t.regressed++
		default:
			t.inconclusive++
			if s := reg.GetSequential().GetStopped(); s != "" && !strings.HasPrefix(s, "budget") {
				t.holding["stopped: "+s]++
			}
			for _, ch := range reg.GetChanges() {
				if ch.GetVerdict() == "inconclusive" {
					t.holding[ch.GetScope()+" "+ch.GetMetric()]++
				}
			}
		}
	}
	fmt.Println("| gate | gates | passed | regressed | inconclusive | runs a side (mean) | minutes (mean) | right | runs missing |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|")
	for _, c := range cases {
		t := tallies[c.suffix]
		if t == nil || t.gates == 0 {
			continue
		}
		right := t.passed
		if c.want == "regressed" {
			right = t.regressed
		}
		fmt.Printf("| %s | %d | %d | %d | %d | %.1f | %.1f | %.0f %% | %d |\n", c.name, t.gates, t.passed, t.regressed, t.inconclusive,
			float64(t.runs)/float64(t.gates), t.minutes/float64(t.gates), 100*float64(right)/float64(t.gates), t.missing)
	}
	for _, c := range cases {
		t := tallies[c.suffix]
		if t == nil {
			continue
		}
		for _, o := range t.other {
			fmt.Printf("\n%s: %s", c.name, o)
		}
		if len(t.holding) == 0 {
			continue
		}
		var held []string
		for k := range t.holding {
			held = append(held, k)
		}
		sort.Slice(held, func(i, j int) bool { return t.holding[held[i]] > t.holding[held[j]] })
		var parts []string
		for _, k := range held[:min(5, len(held))] {
			parts = append(parts, fmt.Sprintf("%s (%d)", k, t.holding[k]))
		}
		fmt.Printf("\n%s, undecided figures: %s", c.name, strings.Join(parts, ", "))
	}
	fmt.Println()
}

// replay decides a gate again from its runs in the order they ran: after every pair from the second, as the
// campaign does, until decided or the budget the gate had. It returns the decision, or why there is none: the
// gate is no gate, a run could not be trusted (the gate then stopped), or the runs ran out before a decision.
func replay(c *irsv1.Comparison) (*irsv1.Regressions, string) {
	seq := c.GetRegressions().GetSequential()
	if seq == nil || len(c.GetVariants()) != 2 {
		return nil, "not an A/B gate"
	}
	base, cand := c.GetVariants()[0].GetRuns(), c.GetVariants()[1].GetRuns()
	d := baseline.Design{MaxRuns: int(seq.GetMaxRuns()), Alpha: baseline.Alpha}
	if seq.GetStopped() != "" && !strings.HasPrefix(seq.GetStopped(), "budget") {
		return c.GetRegressions(), "" // stopped by a run or the time budget: as it was
	}
	for n := 2; n <= d.MaxRuns; n++ {
		if n > len(base) || n > len(cand) {
			return &irsv1.Regressions{}, fmt.Sprintf("%d runs a side recorded, this code looks on", min(len(base), len(cand)))
		}
		reg := baseline.Gate(base[:n], cand[:n], c.GetRegressions().GetLimits(), d, n-1)
		if reg.GetStatus() != "inconclusive" || n == d.MaxRuns {
			return reg, ""
		}
	}
	return nil, "no look"
}

// gateMinutes is the wall time from the first run's start to the end of the last run a decision at n runs a side
// used: the ABBA order's first 2n runs.
func gateMinutes(c *irsv1.Comparison, n int) float64 {
	var first, last float64
	for _, v := range c.GetVariants() {
		for i, r := range v.GetRuns() {
			if i >= n || r.GetStartedAt() == nil || r.GetEndedAt() == nil {
				continue
			}
			s, e := float64(r.GetStartedAt().GetSeconds()), float64(r.GetEndedAt().GetSeconds())
			if first == 0 || s < first {
				first = s
			}
			last = max(last, e)
		}
	}
	return (last - first) / 60
}
