// Package e2e holds IRS's end-to-end tests: real `irs` processes talking over loopback, built once per test
// run. They carry the build tag "integration" (make test runs them; go test ./... stays quick). Every process a
// test starts is in its own process group, dies with the test binary (parent-death signal), and is killed and
// reaped in t.Cleanup.
package e2e
