package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/irs-sim/irs/internal/token"
	"github.com/irs-sim/irs/internal/yamlpb"
	irsv1 "github.com/irs-sim/irs/proto/irs/v1"
	"github.com/irs-sim/irs/workflows/kube"
	"github.com/irs-sim/irs/workflows/report"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// ctlOptions say which workers `irs ctl` acts on: every replica of a service on a cluster (through the
// namespace's relay, as a run reaches them), or workers on this machine by control address.
type ctlOptions struct {
	kube                  kubeOptions
	service               string
	addresses             []string
	tokenValue, tokenFile string
	tokenGiven, fileGiven bool // --token, --token-file were on the command line (empty, too)
	output                string
	timeout               time.Duration
}

// target is one worker ctl acts on.
type target struct {
	name   string
	client irsv1.WorkerControlServiceClient
	skip   string // why it cannot be reached ("" when it can)
}

func (a *app) newCtlCmd() *cobra.Command {
	var o ctlOptions
	cmd := &cobra.Command{
		Use:   "ctl",
		Short: "Read and change the configuration, stats and load of live workers: every replica of a service, or by address",
		Long: `Act on live workers through their control API and report what happened on each.

On a cluster, --namespace and --service name every replica of a service that IRS deployed (a workflow run's,
or the Helm chart's): ctl reaches them through the namespace's relay, over one port-forward, with the
namespace's control token (Secret irs-control-token) unless --token-file names one. On this machine,
--address names workers by their control address (repeatable), with --token or --token-file if they need one.

  irs ctl config get --namespace perf --service server
  irs ctl config patch --namespace perf --service server '{"serve": {"delay": "50ms"}}'
  irs ctl load start --address 127.0.0.1:9101 '{"target": "server", "endpoints": ["127.0.0.1:8081"], "rate": 100}'
  irs ctl stats --namespace perf --service server --reset

Exit codes: 0 every worker did it; 1 one or more did not (each is reported); 2 bad arguments; 4 the cluster
cannot be reached.`,
	}
	o.register(cmd.PersistentFlags())
	cmd.AddCommand(a.newCtlConfigCmd(&o), a.newCtlLoadCmd(&o), a.newCtlStatsCmd(&o), a.newCtlInfoCmd(&o))
	return cmd
}

// register registers the flags every `irs ctl` command has.
func (o *ctlOptions) register(f *pflag.FlagSet) {
	f.StringVar(&o.service, "service", "", "on a cluster: the service whose replicas to act on")
	f.StringVar(&o.kube.namespace, "namespace", "", "on a cluster: the namespace ($IRS_NAMESPACE)")
	f.StringVar(&o.kube.kubeconfig, "kubeconfig", "", "on a cluster: the kubeconfig file (default $KUBECONFIG, then ~/.kube/config)")
	f.StringVar(&o.kube.context, "context", "", "on a cluster: the kubeconfig context ($IRS_KUBE_CONTEXT)")
	f.StringArrayVar(&o.addresses, "address", nil, "on this machine: a worker's control `address` (repeatable)")
	f.StringVar(&o.tokenValue, "token", "", "the control token ($IRS_CONTROL_TOKEN)")
	f.StringVar(&o.tokenFile, "token-file", "", "read the control token from `file`")
	f.StringVarP(&o.output, "output", "o", "text", "text (a line per worker) or json (each worker's answer)")
	f.DurationVar(&o.timeout, "timeout", 10*time.Second, "how long each call may take")
}

// ctlCall is one call ctl makes to every worker: its answer, and a line that says it.
type ctlCall func(context.Context, irsv1.WorkerControlServiceClient) (proto.Message, string, error)

// stateLine is a call's answer that is a configuration state, described.
func stateLine(r interface{ GetState() *irsv1.ConfigState }, err error) (proto.Message, string, error) {
	return r.GetState(), describeState(r.GetState()), err
}

// ctlRun returns a RunE that makes a call to every worker; mutates says it changes their configuration.
func (a *app) ctlRun(o *ctlOptions, mutates bool, fn ctlCall) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error { return a.ctl(cmd, *o, mutates, fn) }
}

func (a *app) newCtlConfigCmd(o *ctlOptions) *cobra.Command {
	config := &cobra.Command{Use: "config", Short: "The workers' configuration"}
	config.AddCommand(
		&cobra.Command{Use: "get", Short: "Print each worker's configuration", Args: cobra.NoArgs,
			RunE: a.ctlRun(o, false, func(ctx context.Context, c irsv1.WorkerControlServiceClient) (proto.Message, string, error) {
				return stateLine(c.GetConfig(ctx, &irsv1.GetConfigRequest{}))
			})},
		&cobra.Command{Use: "patch PATCH|@FILE", Short: "Apply a JSON merge patch to each worker's configuration", Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				doc, err := argDocument(cmd.Context(), args[0])
				if err != nil {
					return withExitCode(err, ExitInvalidConfig)
				}
				return a.ctl(cmd, *o, true, func(ctx context.Context, c irsv1.WorkerControlServiceClient) (proto.Message, string, error) {
					return stateLine(c.UpdateConfig(ctx, &irsv1.UpdateConfigRequest{MergePatch: string(doc)}))
				})
			}},
		&cobra.Command{Use: "replace FILE", Short: "Replace each worker's configuration with a document (YAML or JSON)", Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				cfg := &irsv1.WorkerConfig{}
				if err := readDocument(cmd.Context(), args[0], cfg); err != nil {
					return withExitCode(err, ExitInvalidConfig)
				}
				return a.ctl(cmd, *o, true, func(ctx context.Context, c irsv1.WorkerControlServiceClient) (proto.Message, string, error) {
					return stateLine(c.ReplaceConfig(ctx, &irsv1.ReplaceConfigRequest{Config: cfg}))
				})
			}},
	)
	return config
}

func (a *app) newCtlLoadCmd(o *ctlOptions) *cobra.Command {
	load := &cobra.Command{Use: "load", Short: "The workers' load"}
	load.AddCommand(
		&cobra.Command{Use: "start LOAD|@FILE", Short: "Set each worker's load (an irs.v1.Load, YAML or JSON) and start it", Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				doc, err := argDocument(cmd.Context(), args[0])
				if err != nil {
					return withExitCode(err, ExitInvalidConfig)
				}
				l := &irsv1.Load{}
				if err := yamlpb.Unmarshal(doc, l); err != nil {
					return withExitCode(fmt.Errorf("load: %w", err), ExitInvalidConfig)
				}
				return a.ctl(cmd, *o, true, func(ctx context.Context, c irsv1.WorkerControlServiceClient) (proto.Message, string, error) {
					return stateLine(c.StartLoad(ctx, &irsv1.StartLoadRequest{Load: l}))
				})
			}},
		&cobra.Command{Use: "stop", Short: "Stop each worker's load", Args: cobra.NoArgs,
			RunE: a.ctlRun(o, true, func(ctx context.Context, c irsv1.WorkerControlServiceClient) (proto.Message, string, error) {
				return stateLine(c.StopLoad(ctx, &irsv1.StopLoadRequest{}))
			})},
	)
	return load
}

func (a *app) newCtlStatsCmd(o *ctlOptions) *cobra.Command {
	var reset bool
	stats := &cobra.Command{Use: "stats", Short: "Print what each worker measured since its last reset", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.ctl(cmd, *o, false, func(ctx context.Context, c irsv1.WorkerControlServiceClient) (proto.Message, string, error) {
				r, err := c.GetStats(ctx, &irsv1.GetStatsRequest{ResetWindow: reset})
				return r.GetStats(), describeStats(r.GetStats()), err
			})
		}}
	stats.Flags().BoolVar(&reset, "reset", false, "start a new window after this read")
	return stats
}

func (a *app) newCtlInfoCmd(o *ctlOptions) *cobra.Command {
	return &cobra.Command{Use: "info", Short: "Describe each worker", Args: cobra.NoArgs,
		RunE: a.ctlRun(o, false, func(ctx context.Context, c irsv1.WorkerControlServiceClient) (proto.Message, string, error) {
			r, err := c.GetInfo(ctx, &irsv1.GetInfoRequest{})
			i := r.GetInfo()
			return i, fmt.Sprintf("%s, version %s, up %v, seed %d", i.GetName(), i.GetVersion(),
				time.Duration(i.GetUptimeMs())*time.Millisecond, i.GetSeed()), err
		})}
}

// ctl does one thing to every target, in parallel, and reports each outcome.
// A change ctl makes (mutates) is kept where the workers' configuration lives: on a cluster in the service's
// ConfigMap, which restarted and replacement pods read; workers named by --address have no such place, and ctl
// says the change is live only.
func (a *app) ctl(cmd *cobra.Command, o ctlOptions, mutates bool, fn ctlCall) error {
	if o.output != "text" && o.output != "json" {
		return withExitCode(fmt.Errorf("--output %q: want text or json", o.output), ExitInvalidConfig)
	}
	ctx := cmd.Context()
	o.tokenGiven, o.fileGiven = cmd.Flags().Changed("token"), cmd.Flags().Changed("token-file")
	targets, closeAll, persist, err := a.ctlTargets(ctx, o)
	if err != nil {
		return err
	}
	defer closeAll()
	outs := callAll(ctx, targets, o.timeout, fn)
	failed := a.printOutcomes(targets, outs, o.output)
	if mutates {
		if err := a.keepChange(ctx, persist, outs[0].msg, failed); err != nil {
			return err
		}
	}
	if failed > 0 {
		return withExitCode(fmt.Errorf("%d of %d workers failed", failed, len(targets)), ExitError)
	}
	return nil
}

// ctlOutcome is what one worker answered.
type ctlOutcome struct {
	msg  proto.Message
	line string
	err  error
}

// callAll makes the call to every target that can be reached, in parallel, each within timeout.
func callAll(ctx context.Context, targets []target, timeout time.Duration, fn ctlCall) []ctlOutcome {
	outs := make([]ctlOutcome, len(targets))
	var wg sync.WaitGroup
	for i, t := range targets {
		if t.skip != "" {
			outs[i].err = errors.New(t.skip)
			continue
		}
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			outs[i].msg, outs[i].line, outs[i].err = fn(cctx, t.client)
		})
	}
	wg.Wait()
	return outs
}

// printOutcomes prints each worker's outcome, a line each (text) or a JSON array, and returns how many failed.
func (a *app) printOutcomes(targets []target, outs []ctlOutcome, output string) (failed int) {
	if output == "json" {
		fmt.Fprintln(a.env.Stdout, "[")
	}
	tw := tabwriter.NewWriter(a.env.Stdout, 0, 4, 2, ' ', 0)
	for i, t := range targets {
		res := outs[i]
		if res.err != nil {
			failed++
		}
		if output == "json" {
			sep := ","
			if i == len(targets)-1 {
				sep = ""
			}
			fmt.Fprintln(a.env.Stdout, "  "+jsonOutcome(t.name, res)+sep)
			continue
		}
		if res.err != nil {
			// A worker's answer is its own text: shown, never obeyed by the terminal.
			fmt.Fprintf(tw, "%s\tFAILED\t%s\n", report.Inert(t.name), report.Inert(strings.ReplaceAll(res.err.Error(), "\n", " ")))
		} else {
			fmt.Fprintf(tw, "%s\tok\t%s\n", report.Inert(t.name), report.Inert(res.line))
		}
	}
	tw.Flush()
	if output == "json" {
		fmt.Fprintln(a.env.Stdout, "]")
	}
	return failed
}

// jsonOutcome is a worker's outcome as a JSON object: its name, and its error or its answer.
func jsonOutcome(name string, res ctlOutcome) string {
	entry := `{"worker": ` + quote(name)
	if res.err != nil {
		entry += `, "error": ` + quote(res.err.Error())
	} else if res.msg != nil {
		b, _ := protojson.MarshalOptions{UseProtoNames: true}.Marshal(res.msg)
		entry += `, "result": ` + string(b)
	}
	return entry + "}"
}

// ctlToken is the control token to send: --token-file's, --token's or $IRS_CONTROL_TOKEN's, "" when none is
// given. One given empty is an error, not "none": a script whose variable was unset meant to send one.
func (a *app) ctlToken(ctx context.Context, o ctlOptions) (string, error) {
	value, from, given := o.tokenValue, "--token", o.tokenGiven
	if !given {
		value, given = a.env.LookupEnv("IRS_CONTROL_TOKEN")
		from = "IRS_CONTROL_TOKEN"
	}
	if o.fileGiven && strings.TrimSpace(o.tokenFile) == "" {
		return "", errors.New("--token-file is empty: name the token file")
	}
	if o.tokenFile != "" {
		if o.tokenGiven {
			return "", errors.New("--token and --token-file: give one")
		}
		tok, err := token.Read(ctx, o.tokenFile)
		if err != nil {
			return "", fmt.Errorf("--token-file: %w", err)
		}
		return tok, nil
	}
	if !given {
		return "", nil
	}
	return token.Check(value, from)
}

// keepChange keeps a change that every worker took where the workers' configuration lives, and says where; or
// says why it is live only.
func (a *app) keepChange(ctx context.Context, persist persistFunc, first proto.Message, failed int) error {
	state, _ := first.(*irsv1.ConfigState)
	switch {
	case persist == nil:
		fmt.Fprintln(a.env.Stderr, "live only: workers named by --address keep this until they restart (from their own --config)")
	case failed > 0 || state.GetConfig() == nil:
		fmt.Fprintln(a.env.Stderr, "not persisted: not every worker took the change, so the service's ConfigMap was left as it was")
	default:
		name, err := persist(ctx, state.GetConfig())
		if err != nil {
			return withExitCode(fmt.Errorf("the workers took the change, but it was not persisted (a restarted pod goes back): %w", err), ExitError)
		}
		fmt.Fprintf(a.env.Stderr, "persisted to ConfigMap %s: restarted and replacement pods start with it (a helm upgrade resets it to the chart's values)\n", name)
	}
	return nil
}

// persistFunc keeps a service's configuration where its pods read it, and names where.
type persistFunc func(ctx context.Context, cfg *irsv1.WorkerConfig) (string, error)

// ctlTargets finds the workers: a service's replicas on a cluster, or addresses on this machine. It returns
// them, what closes their connections, and where a change is kept (nil: nowhere).
func (a *app) ctlTargets(ctx context.Context, o ctlOptions) ([]target, func(), persistFunc, error) {
	tok, err := a.ctlToken(ctx, o)
	if err != nil {
		return nil, nil, nil, withExitCode(err, ExitInvalidConfig)
	}
	switch {
	case len(o.addresses) > 0 && o.service != "":
		return nil, nil, nil, withExitCode(errors.New("--address and --service: give one (workers here, or a service's on a cluster)"), ExitInvalidConfig)
	case len(o.addresses) > 0:
		targets, closeAll, err := addressTargets(o.addresses, tok)
		return targets, closeAll, nil, err
	case o.service != "":
		return a.serviceTargets(ctx, o, tok)
	}
	return nil, nil, nil, withExitCode(errors.New("name the workers: --namespace and --service (on a cluster), or --address (here)"), ExitInvalidConfig)
}

// addressTargets are workers on this machine, by control address.
func addressTargets(addresses []string, tok string) ([]target, func(), error) {
	var out []target
	var conns []*grpc.ClientConn
	closeAll := func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}
	for _, addr := range addresses {
		opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
		if tok != "" {
			opts = append(opts, grpc.WithPerRPCCredentials(token.Bearer(tok)))
		}
		conn, err := grpc.NewClient("passthrough:///"+addr, opts...)
		if err != nil {
			return nil, nil, withExitCode(fmt.Errorf("--address %q: %w", addr, err), ExitInvalidConfig)
		}
		conns = append(conns, conn)
		out = append(out, target{name: addr, client: irsv1.NewWorkerControlServiceClient(conn)})
	}
	return out, closeAll, nil
}

// serviceTargets are the replicas of a service on a cluster, reached through the namespace's relay; a change is
// kept in the service's ConfigMap.
func (a *app) serviceTargets(ctx context.Context, o ctlOptions, tok string) ([]target, func(), persistFunc, error) {
	kopts := o.kube
	if err := kopts.resolve(a.env.LookupEnv, nil); err != nil {
		return nil, nil, nil, withExitCode(err, ExitInvalidConfig)
	}
	if kopts.namespace == "" {
		return nil, nil, nil, withExitCode(errors.New("--service: name the --namespace too"), ExitInvalidConfig)
	}
	f, err := kube.Connect(ctx, kube.Access{Kubeconfig: kopts.kubeconfig, Context: kopts.context}, kopts.namespace, tok)
	if err != nil {
		return nil, nil, nil, kubeError(err)
	}
	members, err := f.Members(ctx, o.service)
	if err != nil {
		f.Close()
		return nil, nil, nil, withExitCode(err, ExitInvalidConfig)
	}
	var out []target
	for _, m := range members {
		t := target{name: m.Pod, client: m.Client}
		switch {
		case m.Client == nil:
			t.skip = "no address yet (pending)"
		case !m.Ready:
			t.name += " (not ready)"
		}
		out = append(out, t)
	}
	persist := func(ctx context.Context, cfg *irsv1.WorkerConfig) (string, error) {
		return f.PersistConfig(ctx, o.service, cfg)
	}
	return out, f.Close, persist, nil
}

// argDocument is an argument that is a document, or @FILE.
func argDocument(ctx context.Context, arg string) ([]byte, error) {
	if path, ok := strings.CutPrefix(arg, "@"); ok {
		return yamlpb.ReadFile(ctx, path, "document")
	}
	return []byte(arg), nil
}

// readDocument reads a YAML or JSON document into m.
func readDocument(ctx context.Context, path string, m proto.Message) error {
	b, err := yamlpb.ReadFile(ctx, path, "document")
	if err != nil {
		return err
	}
	root, err := yamlpb.Parse(b, "document")
	if err != nil {
		return err
	}
	if yamlpb.Empty(root) {
		return fmt.Errorf("%s is empty (or null): it would replace the configuration with nothing", path)
	}
	return yamlpb.Decode(root, m, "")
}

func describeState(s *irsv1.ConfigState) string {
	if s == nil {
		return ""
	}
	line := fmt.Sprintf("configuration version %d", s.GetVersion())
	if l := s.GetConfig().GetLoad(); l != nil {
		line += ", load to " + l.GetTarget()
	}
	return line
}

func describeStats(s *irsv1.StatsSnapshot) string {
	var parts []string
	for _, r := range s.GetInbound() {
		if n := r.GetOutcomes().GetRequests(); n > 0 {
			parts = append(parts, fmt.Sprintf("served %d (%s, %d failed) p99 %.2fms", n, r.GetRoute(),
				r.GetOutcomes().GetFailures(), r.GetLatency().GetP99Ms()))
		}
	}
	for _, l := range s.GetLoad() {
		parts = append(parts, fmt.Sprintf("load to %s: %d sent, %d failed, p99 %.2fms, running %v", l.GetTarget(),
			l.GetSent(), l.GetOutcomes().GetFailures(), l.GetLatency().GetP99Ms(), l.GetRunning()))
	}
	if len(parts) == 0 {
		return "nothing measured"
	}
	return strings.Join(parts, "; ")
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
