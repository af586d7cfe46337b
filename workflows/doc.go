// Package workflows defines IRS's workflow documents (irs.v1.Workflow): a service graph of workers and a
// timeline of phases in which load changes, replicas are killed or scaled and workers are reconfigured live,
// with assertions on what the run measured.
//
// Parse decodes a document strictly (unknown fields rejected, every problem at once with line:column); Validate
// checks its meaning (names, references, schedules, every service's worker configuration, assertions). A valid
// document becomes a Timeline: every action occurrence at its absolute time, with the time scale applied, which
// is both what `--dry-run` prints and what the engine executes. A Backend runs the services somewhere.
//
// This package knows nothing of HTTP, processes or clusters: backends (local, kube) and the engine do.
package workflows
