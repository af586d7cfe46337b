package kube

import (
	"slices"
	"testing"
)

// TestNotListed: the victims a kill must report out of their Service at once are those its EndpointSlices did
// not list as ready; under IRS's own mesh, none (its control plane reports removals).
func TestNotListed(t *testing.T) {
	listed := map[string]bool{"a": true, "c": true}
	if got := notListed([]string{"a", "b", "c", "d"}, listed, false); !slices.Equal(got, []string{"b", "d"}) {
		t.Errorf("notListed = %v, want [b d]", got)
	}
	if got := notListed([]string{"a", "b"}, nil, false); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("notListed with no endpoints = %v, want [a b]", got)
	}
	if got := notListed([]string{"b"}, listed, true); got != nil {
		t.Errorf("notListed under IRS's mesh = %v, want none", got)
	}
}
