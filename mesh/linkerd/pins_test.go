package linkerd

import (
	"os"
	"strings"
	"testing"
)

// TestPinsAgree: the commit build.sh builds, the image make linkerd-image names and the defaults here are one.
func TestPinsAgree(t *testing.T) {
	build, err := os.ReadFile("../../hack/meshes/build.sh")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(build), "commit="+ProxyCommit) {
		t.Errorf("hack/meshes/build.sh does not build %s %s", ProxyName, ProxyCommit)
	}
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(mk), "LINKERD_IMAGE ?= "+DefaultProxyImage+"\n") {
		t.Errorf("the Makefile's LINKERD_IMAGE is not %s", DefaultProxyImage)
	}
	if !strings.HasSuffix(DefaultProxyImage, ":"+ProxyCommit[:7]) {
		t.Errorf("DefaultProxyImage %s is not tagged with the commit %s", DefaultProxyImage, ProxyCommit[:7])
	}
}
