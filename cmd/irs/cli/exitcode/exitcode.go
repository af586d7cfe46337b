// Package exitcode is how IRS's commands say which exit code an error ends the process with: an error carries
// its code up to the command's Main, which maps it. Shared by irs and irs-worker.
package exitcode

import (
	"errors"
	"strings"
)

// Exit codes.
const (
	OK            = 0
	Error         = 1 // a runtime failure
	InvalidConfig = 2 // bad flags, environment, configuration file or workflow document
	// AssertionFailed is the exit code of a workflow run whose assertions did not all hold.
	AssertionFailed = 3
	// InvalidEnvironment: the machine or cluster cannot run what the command asks (no Envoy for a mesh; a
	// cluster unreachable, a permission missing, a mesh not installed, an image that cannot be pulled).
	InvalidEnvironment = 4
	// InvalidRun: the run ended, but its measurement cannot be trusted (a load generator fell behind).
	InvalidRun  = 5
	Interrupted = 130
)

// coded carries an exit code up to Main.
type coded struct {
	code int
	err  error
}

func (e *coded) Error() string { return e.err.Error() }
func (e *coded) Unwrap() error { return e.err }

// With attaches an exit code to err (nil stays nil).
func With(err error, code int) error {
	if err == nil {
		return nil
	}
	return &coded{code: code, err: err}
}

// Of returns the exit code err carries (the outermost), and whether it carries one.
func Of(err error) (int, bool) {
	var c *coded
	if errors.As(err, &c) {
		return c.code, true
	}
	return 0, false
}

// For returns the exit code a command that failed with err ends with: the code it carries, InvalidConfig for
// a command-line error (cobra's flag and argument errors), Error otherwise; OK for nil.
func For(err error) int {
	if err == nil {
		return OK
	}
	if code, ok := Of(err); ok {
		return code
	}
	if isUsageError(err) {
		return InvalidConfig
	}
	return Error
}

// isUsageError recognises cobra's flag and argument errors.
func isUsageError(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown flag", "unknown shorthand", "invalid argument", "flag needs an argument",
		"unknown command", "accepts ", "requires at least", "bad flag syntax"} {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}
