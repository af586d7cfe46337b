// Package names holds the one rule for the names a workflow gives: the workflow's and its phases'. Each becomes a
// tag value on every worker (`workflow=`, `phase=`), a Kubernetes label value, and a path element of the run
// directory, so a name must be one that every one of them accepts. A phase named "warm up" was accepted, then
// refused as a tag by every worker, and every replacement replica exited; a workflow named "../x" wrote outside
// --run-dir.
package names

import "fmt"

// MaxLength is the longest name: a Kubernetes label value's limit.
const MaxLength = 63

// Rule says what a name may be, for error messages and the documentation.
const Rule = "1 to 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit"

// Check reports whether s is a valid name (nil) or why not.
func Check(s string) error {
	if s == "" {
		return fmt.Errorf("empty: a name is %s", Rule)
	}
	if len(s) > MaxLength {
		return fmt.Errorf("%d characters: a name is %s", len(s), Rule)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if alnum || (c == '-' || c == '_' || c == '.') && i > 0 && i < len(s)-1 {
			continue
		}
		return fmt.Errorf("%q: a name is %s", s, Rule)
	}
	return nil
}
