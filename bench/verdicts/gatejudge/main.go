// Command gatejudge reads the A/B gates made by bench/verdicts/run.sh gate and prints, per kind of gate (an A/A
// gate of unchanged code, and each real change), how often it passed, regressed or stayed inconclusive, the runs
// a side it took, and what held the undecided ones back: the table of docs/reports.md.
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
		reg := f.Comparison.GetRegressions()
		if reg.GetSequential() == nil {
			t.other = append(t.other, fmt.Sprintf("%s: %s, no gate", path, f.Comparison.GetStatus()))
			continue
		}
		t.gates++
		t.runs += int(reg.GetSequential().GetRuns())
		switch reg.GetStatus() {
		case "passed":
			t.passed++
		case "regressed":
			t.regressed++
		default:
			t.inconclusive++
			if s := reg.GetSequential().GetStopped(); !strings.HasPrefix(s, "budget") {
				t.holding["stopped: "+s]++
			}
			for _, ch := range reg.GetChanges() {
				if ch.GetVerdict() == "inconclusive" {
					t.holding[ch.GetScope()+" "+ch.GetMetric()]++
				}
			}
		}
	}
	fmt.Println("| gate | gates | passed | regressed | inconclusive | runs a side (mean) | right |")
	fmt.Println("|---|---|---|---|---|---|---|")
	for _, c := range cases {
		t := tallies[c.suffix]
		if t == nil || t.gates == 0 {
			continue
		}
		right := t.passed
		if c.want == "regressed" {
			right = t.regressed
		}
		fmt.Printf("| %s | %d | %d | %d | %d | %.1f | %.0f %% |\n", c.name, t.gates, t.passed, t.regressed, t.inconclusive,
			float64(t.runs)/float64(t.gates), 100*float64(right)/float64(t.gates))
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
