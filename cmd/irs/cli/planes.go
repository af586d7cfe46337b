package cli

import (
	"github.com/irs-sim/irs/mesh/ambient"
	"github.com/irs-sim/irs/mesh/dataplane"
	"github.com/irs-sim/irs/mesh/envoy"
	"github.com/irs-sim/irs/mesh/installed"
	"github.com/irs-sim/irs/mesh/linkerd"
)

// planeImages are the images and binaries the data planes of IRS's own run.
type planeImages struct {
	envoyImage, envoyPath, linkerdImage, ztunnelImage string
}

// dataPlanes registers every data plane IRS knows: the one place that names them. A new data plane is a
// package implementing dataplane.Plane and a line here.
func dataPlanes(o planeImages) *dataplane.Registry {
	return dataplane.NewRegistry(
		&envoy.Plane{Image: o.envoyImage, Binary: o.envoyPath},
		&linkerd.Plane{Image: o.linkerdImage},
		&ambient.Plane{Image: o.ztunnelImage},
		installed.Istio(),
		installed.Linkerd(),
		installed.Ambient(),
	)
}
