// Package logflags is the logging flags every IRS command shares (--log-level, --log-format) and the slog
// logger they build.
package logflags

import (
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"
)

// Options are the global logging flags.
type Options struct {
	level, format string
}

// Register registers the flags on cmd and its subcommands.
func (o *Options) Register(cmd *cobra.Command) {
	cmd.PersistentFlags().StringVar(&o.level, "log-level", "info", "log `level`: debug, info, warn, error")
	cmd.PersistentFlags().StringVar(&o.format, "log-format", "text", "log `format`: text or json")
}

// Build returns the logger the flags ask for, writing to w.
func (o *Options) Build(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", o.level)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch strings.ToLower(o.format) {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", o.format)
}
