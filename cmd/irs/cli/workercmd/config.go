package workercmd

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/irs-sim/irs/cmd/irs/cli/exitcode"
	"github.com/irs-sim/irs/internal/field"
	"github.com/irs-sim/irs/internal/yamlpb"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/worker"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"go.yaml.in/yaml/v3"
)

// configOverride maps one flag (and its IRS_* environment variable) onto a field of the worker document.
type configOverride struct {
	flag, usage string
	path        string // field path in the document, for error messages
	apply       func(cfg *irsv1.WorkerConfig, v *viper.Viper, key string) error
}

// workerOverrides are the document fields settable by flag or environment. Everything else (parallel calls,
// retries, shaped load) is set in the --config file.
var workerOverrides = []configOverride{
	{flag: "name", usage: "service `name` this worker plays", path: "name",
		apply: func(c *irsv1.WorkerConfig, v *viper.Viper, k string) error { c.Name = v.GetString(k); return nil }},
	{flag: "seed", usage: "`seed` for every random draw (0: random, reported in stats)", path: "seed",
		apply: func(c *irsv1.WorkerConfig, v *viper.Viper, k string) error {
			n, err := strconv.ParseUint(v.GetString(k), 10, 64)
			if err != nil {
				return fmt.Errorf("invalid seed %q", v.GetString(k))
			}
			c.Seed = n
			return nil
		}},
	{flag: "listen", usage: "data-plane `address` (HTTP/1.1, h2c, gRPC), e.g. 127.0.0.1:8080", path: "listen",
		apply: func(c *irsv1.WorkerConfig, v *viper.Viper, k string) error { c.Listen = v.GetString(k); return nil }},
	{flag: "delay", usage: "service time: `delay` such as 50ms, lognormal(p50=20ms, p99=200ms), 10ms:90,1s:10", path: "serve.delay",
		apply: func(c *irsv1.WorkerConfig, v *viper.Viper, k string) error {
			serve(c).Delay = v.GetString(k)
			return nil
		}},
	{flag: "status", usage: "injected `statuses`, e.g. 503:5%,429:1% (or UNAVAILABLE:5%)", path: "serve.status",
		apply: func(c *irsv1.WorkerConfig, v *viper.Viper, k string) error {
			m, err := parseStatusFlag(v.GetString(k))
			serve(c).Status = m
			return err
		}},
	{flag: "size", usage: "response body `bytes`", path: "serve.size",
		apply: func(c *irsv1.WorkerConfig, v *viper.Viper, k string) error {
			n, err := strconv.ParseInt(v.GetString(k), 10, 64)
			if err != nil {
				return fmt.Errorf("invalid size %q (want bytes)", v.GetString(k))
			}
			serve(c).Size = n
			return nil
		}},
	{flag: "cpu", usage: "busy CPU `time` per request, e.g. 2ms", path: "serve.cpu",
		apply: func(c *irsv1.WorkerConfig, v *viper.Viper, k string) error { serve(c).Cpu = v.GetString(k); return nil }},
	{flag: "call", usage: "call a service on every request: `name=host:port,...` (repeat for more, in order)", path: "calls",
		apply: func(c *irsv1.WorkerConfig, v *viper.Viper, k string) error {
			for _, s := range listValue(v, k) {
				svc, eps, err := parseTargetFlag(s)
				if err != nil {
					return err
				}
				c.Calls = append(c.Calls, &irsv1.Call{Service: svc, Endpoints: eps})
			}
			return nil
		}},
	{flag: "target", usage: "generate load to `name=host:port,...`", path: "load.target",
		apply: func(c *irsv1.WorkerConfig, v *viper.Viper, k string) error {
			svc, eps, err := parseTargetFlag(v.GetString(k))
			load(c).Target, load(c).Endpoints = svc, eps
			return err
		}},
	{flag: "rate", usage: "load: constant arrival `rate` in requests per second", path: "load.rate",
		apply: func(c *irsv1.WorkerConfig, v *viper.Viper, k string) error {
			f, err := strconv.ParseFloat(v.GetString(k), 64)
			if err != nil {
				return fmt.Errorf("invalid rate %q (want requests per second)", v.GetString(k))
			}
			load(c).Rate = f
			return nil
		}},
	{flag: "duration", usage: "load: how long to send (default: until stopped)", path: "load.duration",
		apply: func(c *irsv1.WorkerConfig, v *viper.Viper, k string) error {
			load(c).Duration = v.GetString(k)
			return nil
		}},
	{flag: "connections", usage: "load: requests in flight at most (connections for HTTP/1.1)", path: "load.connections",
		apply: func(c *irsv1.WorkerConfig, v *viper.Viper, k string) error {
			n, err := strconv.ParseUint(v.GetString(k), 10, 32)
			if err != nil {
				return fmt.Errorf("invalid connections %q", v.GetString(k))
			}
			load(c).Connections = uint32(n)
			return nil
		}},
	{flag: "arrivals", usage: "load: uniform or poisson", path: "load.arrivals",
		apply: func(c *irsv1.WorkerConfig, v *viper.Viper, k string) error {
			load(c).Arrivals = v.GetString(k)
			return nil
		}},
	{flag: "pacing", usage: "load: precise (default) or coarse (bursts; cheaper)", path: "load.pacing",
		apply: func(c *irsv1.WorkerConfig, v *viper.Viper, k string) error {
			load(c).Pacing = v.GetString(k)
			return nil
		}},
	{flag: "mode", usage: "load: open (scheduled arrivals) or closed (maximum throughput)", path: "load.mode",
		apply: func(c *irsv1.WorkerConfig, v *viper.Viper, k string) error { load(c).Mode = v.GetString(k); return nil }},
	{flag: "protocol", usage: "protocol of --call and --target requests: http1, http2 or grpc", path: "protocol",
		apply: func(c *irsv1.WorkerConfig, v *viper.Viper, k string) error {
			p := v.GetString(k)
			for _, call := range c.Calls {
				if call.Protocol == "" {
					call.Protocol = p
				}
			}
			if c.Load != nil && c.Load.Protocol == "" {
				c.Load.Protocol = p
			}
			return nil
		}},
	{flag: "timeout", usage: "timeout of each --call and --target request", path: "timeout",
		apply: func(c *irsv1.WorkerConfig, v *viper.Viper, k string) error {
			t := v.GetString(k)
			for _, call := range c.Calls {
				if call.Timeout == "" {
					call.Timeout = t
				}
			}
			if c.Load != nil && c.Load.Timeout == "" {
				c.Load.Timeout = t
			}
			return nil
		}},
}

func serve(c *irsv1.WorkerConfig) *irsv1.Serve {
	if c.Serve == nil {
		c.Serve = &irsv1.Serve{}
	}
	return c.Serve
}

func load(c *irsv1.WorkerConfig) *irsv1.Load {
	if c.Load == nil {
		c.Load = &irsv1.Load{}
	}
	return c.Load
}

// listValue reads a repeatable flag, or its environment variable as a ;-separated list.
func listValue(v *viper.Viper, key string) []string {
	if s, ok := v.Get(key).(string); ok {
		var out []string
		for _, p := range strings.Split(s, ";") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
		return out
	}
	return v.GetStringSlice(key)
}

// parseTargetFlag parses "name=host:port,host:port".
func parseTargetFlag(s string) (string, []string, error) {
	name, eps, ok := strings.Cut(s, "=")
	if !ok || name == "" {
		return "", nil, fmt.Errorf("%q: want name=host:port[,host:port...]", s)
	}
	var out []string
	for _, ep := range strings.Split(eps, ",") {
		if ep = strings.TrimSpace(ep); ep != "" {
			out = append(out, ep)
		}
	}
	return strings.TrimSpace(name), out, nil
}

// parseStatusFlag parses "503:5%,429:1%" into a document's status map.
func parseStatusFlag(s string) (map[string]string, error) {
	m := map[string]string{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		code, pct, ok := strings.Cut(part, ":")
		if !ok {
			return nil, fmt.Errorf("%q: want code:percent[,code:percent...], e.g. 503:5%%", s)
		}
		m[strings.TrimSpace(code)] = strings.TrimSpace(pct)
	}
	return m, nil
}

// envName returns the environment variable of a flag: IRS_ and the flag in upper case with _ for -.
func envName(flag string) string {
	return "IRS_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// newViper returns a viper instance bound to flags and to IRS_* environment variables.
func newViper(flags *pflag.FlagSet) *viper.Viper {
	v := viper.New()
	v.SetEnvPrefix("IRS")
	v.SetEnvKeyReplacer(strings.NewReplacer("-", "_"))
	v.AutomaticEnv()
	_ = v.BindPFlags(flags) // cannot fail for a non-nil flag set
	return v
}

// configSource says where a document's value came from, for error messages.
type configSource struct {
	file string     // config file path ("" when none)
	node *yaml.Node // its parsed YAML, for positions
	// byPath names the flag or variable that set a field, overriding the file.
	byPath map[string]string
}

// loadWorkerConfig builds the worker document: the --config file (strictly decoded, with positions), then
// every flag or IRS_* variable that is set, which take precedence. Problems in the file are returned as field
// errors next to a partly decoded document, so that the caller can report them together with the semantic
// ones; an unreadable file or a bad flag is an error.
func loadWorkerConfig(ctx context.Context, v *viper.Viper, flags *pflag.FlagSet, lookupEnv func(string) (string, bool)) (*irsv1.WorkerConfig, *configSource, field.List, error) {
	cfg := &irsv1.WorkerConfig{}
	src := &configSource{byPath: map[string]string{}}
	var decodeErrs field.List
	if path := v.GetString("config"); path != "" {
		src.file = path
		data, err := yamlpb.ReadFile(ctx, path, "worker configuration")
		var tooBig *yamlpb.LimitError
		if errors.As(err, &tooBig) {
			return nil, nil, nil, src.describe(tooBig)
		}
		if err != nil {
			return nil, nil, nil, fmt.Errorf("read config: %w", err)
		}
		// Not YAML, or beyond the limits: that one problem, positioned.
		root, err := yamlpb.Parse(data, "worker configuration")
		if err != nil {
			return nil, nil, nil, src.describe(err)
		}
		src.node = root
		decodeErrs = field.Flatten(yamlpb.Decode(root, cfg, ""))
	}
	var errs []error
	for _, o := range workerOverrides {
		f := flags.Lookup(o.flag)
		_, inEnv := lookupEnv(envName(o.flag))
		if (f == nil || !f.Changed) && !inEnv {
			continue
		}
		origin := "--" + o.flag
		if f == nil || !f.Changed {
			origin = envName(o.flag)
		}
		src.byPath[o.path] = origin
		if err := o.apply(cfg, v, o.flag); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", origin, err))
		}
	}
	return cfg, src, decodeErrs, errors.Join(errs...)
}

// describe formats compile errors with where each field came from: file:line:column, or the flag.
func (s *configSource) describe(err error) error {
	list := field.List(field.Flatten(err))
	if s.node != nil {
		list.Locate(s.node)
	}
	// Flags and variables first, then the file from top to bottom.
	sort.SliceStable(list, func(i, j int) bool {
		oi, oj := s.originOf(list[i].Path) != "", s.originOf(list[j].Path) != ""
		if oi != oj {
			return oi
		}
		if list[i].Line != list[j].Line {
			return list[i].Line < list[j].Line
		}
		return list[i].Column < list[j].Column
	})
	var b strings.Builder
	fmt.Fprintf(&b, "invalid worker configuration (%d problem%s):", len(list), plural(len(list)))
	for _, e := range list {
		b.WriteString("\n  ")
		if origin := s.originOf(e.Path); origin != "" {
			fmt.Fprintf(&b, "%s (%s): %v", origin, e.Path, e.Err)
			continue
		}
		if s.file != "" && e.Line > 0 {
			fmt.Fprintf(&b, "%s:%d:%d: ", s.file, e.Line, e.Column)
		}
		if e.Path != "" {
			fmt.Fprintf(&b, "%s: ", e.Path)
		}
		fmt.Fprintf(&b, "%v", e.Err)
	}
	return errors.New(b.String())
}

// originOf returns the flag or variable that set path (or one of its parents), if any.
func (s *configSource) originOf(path string) string {
	for p, origin := range s.byPath {
		if path == p || strings.HasPrefix(path, p+".") || strings.HasPrefix(path, p+"[") {
			return origin
		}
	}
	return ""
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// compileWorker loads and compiles the worker configuration, reporting every problem of the file and of the
// flags at once; errors carry exitcode.InvalidConfig.
func compileWorker(ctx context.Context, v *viper.Viper, flags *pflag.FlagSet, lookupEnv func(string) (string, bool)) (*worker.Spec, *configSource, error) {
	cfg, src, decodeErrs, err := loadWorkerConfig(ctx, v, flags, lookupEnv)
	if err != nil {
		return nil, nil, exitcode.With(err, exitcode.InvalidConfig)
	}
	spec, err := worker.Compile(cfg)
	if err == nil && len(decodeErrs) == 0 {
		return spec, src, nil
	}
	return nil, nil, exitcode.With(src.describe(field.Combine(decodeErrs, err).Err()), exitcode.InvalidConfig)
}
