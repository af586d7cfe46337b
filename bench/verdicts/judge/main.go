// Command judge compares the runs made by bench/verdicts/run.sh the way `irs workflow compare` does, and prints
// how often the verdicts are right: noise called a regression (A/A pairs), a +20 % p50 slowdown caught, a 4x
// p99 in 5 s of a 60 s phase caught; with one run a side and with three (sides made of three rounds' runs, as
// --repeat 3 would make them). It also prints how much each figure moved between identical runs, beside what
// each run's own series said its noise was: what the single-run drift of workflows/baseline is set from.
//
//	go run ./bench/verdicts/judge DIR
package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows/baseline"
	"github.com/irs-sim/irs/workflows/resultfile"
)

// round is one round's four runs (nil where a run is missing or invalid).
type round struct {
	name                string
	a1, slow, a2, stall *irsv1.WorkflowResult
	invalid             []string
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: judge DIR")
		os.Exit(2)
	}
	rounds, err := load(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "judge:", err)
		os.Exit(1)
	}
	limits, err := baseline.ParseLimits(baseline.DefaultLimits)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%d rounds in %s\n", len(rounds), os.Args[1])
	for _, r := range rounds {
		if len(r.invalid) > 0 {
			fmt.Printf("  round %s: %s\n", r.name, strings.Join(r.invalid, "; "))
		}
	}
	fmt.Println()
	fmt.Println("| runs a side | case | pairs | regressed | inconclusive | passed | caught (the metric regressed) |")
	fmt.Println("|---|---|---|---|---|---|---|")
	for _, n := range []int{1, 2, 3} {
		groups := group(rounds, n)
		judge(n, "A/A (same workflow, same seed)", groups, func(r round) (*irsv1.WorkflowResult, *irsv1.WorkflowResult) { return r.a1, r.a2 }, limits, "")
		judge(n, "server +20 % (p50)", groups, func(r round) (*irsv1.WorkflowResult, *irsv1.WorkflowResult) { return r.a1, r.slow }, limits, "loadgen p50 in steady")
		judge(n, "server 4x for 5 s of 60 (p99)", groups, func(r round) (*irsv1.WorkflowResult, *irsv1.WorkflowResult) { return r.a2, r.stall }, limits, "loadgen p99 in steady")
	}
	// Three runs a side from every three consecutive rounds: more pairs, but they share runs (not independent).
	var sliding [][]round
	for i := 0; i+3 <= len(rounds); i++ {
		sliding = append(sliding, rounds[i:i+3])
	}
	judge(3, "A/A (sliding windows)", sliding, func(r round) (*irsv1.WorkflowResult, *irsv1.WorkflowResult) { return r.a1, r.a2 }, limits, "")
	judge(3, "server +20 % (sliding windows)", sliding, func(r round) (*irsv1.WorkflowResult, *irsv1.WorkflowResult) { return r.a1, r.slow }, limits, "loadgen p50 in steady")
	judge(3, "server 4x for 5 s (sliding windows)", sliding, func(r round) (*irsv1.WorkflowResult, *irsv1.WorkflowResult) { return r.a2, r.stall }, limits, "loadgen p99 in steady")
	fmt.Println()
	drift(rounds)
}

// load reads DIR/NN-{a1,slow,a2,stall}/result.json.
func load(dir string) ([]round, error) {
	byName := map[string]*round{}
	matches, err := filepath.Glob(filepath.Join(dir, "*-*", "result.json"))
	if err != nil {
		return nil, err
	}
	for _, m := range matches {
		name, kind, _ := strings.Cut(filepath.Base(filepath.Dir(m)), "-")
		f, err := resultfile.Read(context.Background(), m)
		if err != nil {
			return nil, err
		}
		r := byName[name]
		if r == nil {
			r = &round{name: name}
			byName[name] = r
		}
		res := f.Result
		if st := res.GetStatus(); st != "passed" {
			r.invalid = append(r.invalid, fmt.Sprintf("%s is %s", kind, st))
		}
		switch kind {
		case "a1":
			r.a1 = res
		case "a2":
			r.a2 = res
		case "slow":
			r.slow = res
		case "stall":
			r.stall = res
		}
	}
	var out []round
	for _, r := range byName {
		// A round with an invalid run is left out: its verdict would be inconclusive by design, not by noise.
		if r.a1 != nil && r.a2 != nil && r.slow != nil && r.stall != nil && len(r.invalid) == 0 {
			out = append(out, *r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, nil
}

// group makes groups of n consecutive rounds.
func group(rounds []round, n int) [][]round {
	var out [][]round
	for i := 0; i+n <= len(rounds); i += n {
		out = append(out, rounds[i:i+n])
	}
	return out
}

// file makes a side from runs: the run itself, or a comparison of them as --repeat would write it.
func file(path string, runs []*irsv1.WorkflowResult) *resultfile.File {
	if len(runs) == 1 {
		return &resultfile.File{Path: path, Result: runs[0]}
	}
	return &resultfile.File{Path: path, Comparison: &irsv1.Comparison{Status: "passed", Workflow: runs[0].GetWorkflow(),
		Environment: runs[0].GetEnvironment(), Repeat: uint32(len(runs)),
		Variants: []*irsv1.Variant{{Name: baseline.VariantName(runs[0]), Runs: runs}}}}
}

func judge(n int, label string, groups [][]round, pick func(round) (*irsv1.WorkflowResult, *irsv1.WorkflowResult), limits []*irsv1.RegressionLimit, want string) {
	counts := map[string]int{}
	caught := 0
	var mdcs []float64
	for _, g := range groups {
		var bs, cs []*irsv1.WorkflowResult
		for _, r := range g {
			b, c := pick(r)
			bs, cs = append(bs, b), append(cs, c)
		}
		reg, err := baseline.Compare(file("base", bs), file("current", cs), limits)
		if err != nil {
			fmt.Fprintln(os.Stderr, "judge:", err)
			os.Exit(1)
		}
		counts[reg.GetStatus()]++
		for _, ch := range reg.GetChanges() {
			name := ch.GetScope() + " " + ch.GetMetric() + " in " + ch.GetPhase()
			if want != "" && name == want {
				if ch.GetVerdict() == baseline.VerdictRegressed {
					caught++
				}
				if os.Getenv("JUDGE_DEBUG") != "" {
					fmt.Fprintf(os.Stderr, "n=%d %s: %s base %.4f cur %.4f rel %+.1f%% se %.5f q %.4f mdc %.5f\n", n, label, ch.GetVerdict(), ch.GetBase(), ch.GetCurrent(), 100*ch.GetRelative(), ch.GetStandardError(), ch.GetPValue(), ch.GetMinimumDetectable())
				}
				mdcs = append(mdcs, ch.GetMinimumDetectable()/math.Max(ch.GetBase(), 1e-12))
			}
		}
	}
	if len(groups) == 0 {
		return
	}
	catch := "-"
	if want != "" {
		slices.Sort(mdcs)
		catch = fmt.Sprintf("%d of %d (%s; median minimum detectable change %.1f %%)", caught, len(groups), want, 100*mdcs[len(mdcs)/2])
	}
	fmt.Printf("| %d | %s | %d | %d | %d | %d | %s |\n", n, label, len(groups), counts[baseline.StatusRegressed],
		counts[baseline.StatusInconclusive], counts[baseline.StatusPassed], catch)
}

// drift prints, per metric of the load generator's and the server's phase, how much the figure moved between the
// two identical runs of each round (|a2-a1|/a1), beside the noise each run's own series showed.
func drift(rounds []round) {
	type key struct{ scope, metric string }
	moved := map[key][]float64{}
	for _, r := range rounds {
		reg, err := baseline.Compare(file("a1", []*irsv1.WorkflowResult{r.a1}), file("a2", []*irsv1.WorkflowResult{r.a2}), nil)
		if err != nil {
			continue
		}
		for _, ch := range reg.GetChanges() {
			if ch.GetPhase() != "steady" || ch.GetBase() == 0 {
				continue
			}
			k := key{ch.GetScope(), ch.GetMetric()}
			moved[k] = append(moved[k], math.Abs(ch.GetRelative()))
		}
	}
	var keys []key
	for k := range moved {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].scope != keys[j].scope {
			return keys[i].scope < keys[j].scope
		}
		return keys[i].metric < keys[j].metric
	})
	fmt.Println("Between identical runs (A/A, one phase of 60 s): |change| relative to the first run")
	fmt.Println("| scope | metric | median | 90th percentile | largest |")
	fmt.Println("|---|---|---|---|---|")
	for _, k := range keys {
		v := moved[k]
		slices.Sort(v)
		fmt.Printf("| %s | %s | %.1f %% | %.1f %% | %.1f %% |\n", k.scope, k.metric, 100*v[len(v)/2], 100*v[len(v)*9/10], 100*v[len(v)-1])
	}
}
