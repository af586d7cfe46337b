// Command bench measures IRS against peer tools on this machine, in one run, and prints ratios: server
// throughput and CPU against nginx and fortio's server, load-generator CPU per request against wrk and fortio,
// open-loop rate accuracy, and idle worker memory. Servers run pinned to CPU 0 and load to CPU 1 (taskset) with
// GOMAXPROCS=1, as in the peer measurements of shared/research.
//
// Run it with `make bench` (which installs wrk, nginx and fortio first).
package main
