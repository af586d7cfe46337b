// Package page renders results as one self-contained HTML page: it opens offline (no CDN, nothing fetched),
// with the run's time series drawn on one time axis (phases shaded, kills, replacements, endpoint changes,
// configuration and load changes marked, cursors in step across charts), the phase and edge tables, the
// kills, the assertions, and the changes against a baseline. A comparison shows each figure per variant with
// its spread; a sweep, each figure against the swept parameter.
//
// Charts are drawn by uPlot (MIT), which `make assets` takes from npm at the version web/package-lock.json
// pins and this package embeds; the page's own script (assets/report.js) lays the charts out from the data
// the page carries as JSON. Long runs are downsampled to a bounded number of points (the worst second of each
// bucket for latency and 5xx, the mean for rates, CPU and memory), so an hour of a hundred services stays a
// page of a few megabytes.
package page

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"strings"
	"time"

	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows/report"
)

//go:embed assets
var assets embed.FS

// ErrNoChartLibrary is a binary built without the chart library (a plain `go build`, before `make assets`).
var ErrNoChartLibrary = errors.New("this irs was built without its chart library (uPlot, which `make assets` takes from npm): build it with make")

var pageTemplate = template.Must(template.New("page.html.tmpl").Funcs(template.FuncMap{
	"upper": strings.ToUpper,
	"pct":   func(v float64) string { return fmt.Sprintf("%.2f%%", 100*v) },
	"f0":    func(v float64) string { return fmt.Sprintf("%.0f", v) },
	"f1":    func(v float64) string { return fmt.Sprintf("%.1f", v) },
	"f2":    func(v float64) string { return fmt.Sprintf("%.2f", v) },
	"secs":  func(v float64) string { return fmt.Sprintf("%.2fs", v) },
}).ParseFS(assets, "assets/page.html.tmpl"))

// view is what the template shows.
type view struct {
	Title      string
	Status     string
	Facts      []string
	Notes      []string
	Error      string
	Saturation []*irsv1.Saturation
	Invalid    []string
	Assertions []assertionRow
	Regression *regressionView
	Phases     []phaseView
	Kills      []killRow
	Replicas   *replicaView
	Faults     []report.Fault
	FaultsSide *report.FaultComparison
	Events     []*irsv1.RunEvent
	Env        [][2]string
	Figures    *figureTable
	Suite      []suiteRow

	Data     template.JS
	UplotJS  template.JS
	UplotCSS template.CSS
	JS       template.JS
	CSS      template.CSS
}

// render fills in the assets and the data, and writes the page.
func render(w io.Writer, v *view, d *data) error {
	read := func(name string) (string, error) {
		b, err := fs.ReadFile(assets, "assets/"+name)
		return string(b), err
	}
	ujs, err := read("vendor/uPlot.iife.min.js")
	if err != nil {
		return ErrNoChartLibrary
	}
	ucss, err := read("vendor/uPlot.min.css")
	if err != nil {
		return ErrNoChartLibrary
	}
	license, _ := read("vendor/LICENSE")
	js, err := read("report.js")
	if err != nil {
		return err
	}
	css, err := read("report.css")
	if err != nil {
		return err
	}
	if d == nil {
		d = &data{}
	}
	// json.Marshal escapes <, > and &, so the data cannot end its script element.
	b, err := json.Marshal(d)
	if err != nil {
		return fmt.Errorf("page data: %w", err)
	}
	v.Data = template.JS(b)
	v.UplotJS = template.JS("/*! uPlot " + strings.ReplaceAll(license, "*/", "* /") + "*/\n" + ujs)
	v.UplotCSS, v.JS, v.CSS = template.CSS(ucss), template.JS(js), template.CSS(css)
	var out bytes.Buffer
	if err := pageTemplate.Execute(&out, v); err != nil {
		return fmt.Errorf("page: %w", err)
	}
	_, err = w.Write(out.Bytes())
	return err
}

// environment lists what a run ran on.
func environment(env *irsv1.Environment, extra ...[2]string) [][2]string {
	rows := [][2]string{{"IRS", env.GetIrsVersion()}, {"Go", env.GetGoVersion()}, {"Host", env.GetHostname()},
		{"OS", env.GetOs() + "/" + env.GetArch() + " " + env.GetKernel()}, {"CPUs", fmt.Sprint(env.GetCpus())},
		{"Backend", env.GetBackend()}, {"Mesh", env.GetMesh()}, {"Envoy", env.GetEnvoyVersion()},
		{"Kubernetes", env.GetKubernetesVersion()}, {"Namespace", env.GetNamespace()}, {"Image", env.GetImage()}}
	if env.GetNodes() > 0 {
		rows = append(rows, [2]string{"Nodes", fmt.Sprint(env.GetNodes())})
	}
	var out [][2]string
	for _, r := range append(rows, extra...) {
		if strings.TrimSpace(strings.Trim(r[1], "/")) != "" {
			out = append(out, r)
		}
	}
	return out
}

func when(t interface{ AsTime() time.Time }) string {
	return t.AsTime().UTC().Format("2006-01-02 15:04:05 UTC")
}

// HasChartLibrary reports whether the binary carries the chart library.
func HasChartLibrary() bool {
	_, err := fs.Stat(assets, "assets/vendor/uPlot.iife.min.js")
	return err == nil
}
