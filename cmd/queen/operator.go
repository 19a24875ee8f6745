package main

// The operator verbs (SPEC.md §13, issue 14): queen queues, queen dedup,
// queen dlq list|replay and queen cluster, over the broker's HTTP gateway.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/transport/client"
	"github.com/queen-mq/queen-go/transport/wire"
)

// Exit codes of the operator verbs (README, Operator API and CLI).
const (
	exitOK = 0
	// exitError: the broker refused the request (4xx/5xx), or could not be
	// reached; a replay with a failed dead letter.
	exitError = 1
	// exitUsage: bad arguments or flags; nothing was sent.
	exitUsage = 2
	// exitExpired and exitUnknown: queen dedup found the id outside its
	// window (expired) or not at all (unknown): its next push is queued.
	exitExpired = 3
	exitUnknown = 4
)

// codeError ends the process with code; err (may be nil: the output said
// everything) is printed to standard error.
type codeError struct {
	code int
	err  error
}

func (e *codeError) Error() string {
	if e.err == nil {
		return ""
	}
	return e.err.Error()
}

func (e *codeError) Unwrap() error { return e.err }

// checkNames checks names (pairs of value and the argument or flag that
// gave it) as the broker checks them (queen.ValidateName; a "TRANSACTION_ID"
// by queen.ValidateTransactionID); empty values are skipped. A value the
// broker would refuse is a usage error naming the argument and the broker's
// code, before anything is encoded or sent (encoding would turn invalid
// UTF-8 into U+FFFD and name another queue).
func checkNames(pairs ...string) error {
	for i := 0; i+1 < len(pairs); i += 2 {
		v, what := pairs[i], pairs[i+1]
		if v == "" {
			continue
		}
		var err error
		if what == "TRANSACTION_ID" {
			err = queen.ValidateTransactionID(v, what)
		} else {
			err = queen.ValidateName(v, what)
		}
		if err != nil {
			return usageErr("%s (%s); nothing was sent", err, queen.AsError(err).Code)
		}
	}
	return nil
}

func usageErr(format string, args ...any) error {
	return &codeError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

// exitCode is the process exit code for an error returned by a command:
// its codeError's, else 1.
func exitCode(err error) int {
	if err == nil {
		return exitOK
	}
	var ce *codeError
	if errors.As(err, &ce) {
		return ce.code
	}
	return exitError
}

// opFlags are the flags every operator verb takes.
type opFlags struct {
	server  string
	token   string
	tls     clientTLS
	output  string
	timeout time.Duration
}

func (o *opFlags) register(cmd *cobra.Command) {
	server, _ := defaultServer()
	f := cmd.Flags()
	f.StringVar(&o.server, "server", server, "HTTP gateway of the broker (env: http://<QUEEN_HTTP_ADDR>, default http://127.0.0.1:6632)")
	f.StringVar(&o.token, "token", os.Getenv("QUEEN_ADMIN_TOKEN"), "admin token sent as Authorization: Bearer (env QUEEN_ADMIN_TOKEN)")
	f.StringVar(&o.tls.caFile, "ca-file", os.Getenv("QUEEN_CA_FILE"), "PEM CA to trust for an https:// --server, besides the system's (env QUEEN_CA_FILE)")
	o.tls.registerCert(f)
	f.StringVarP(&o.output, "output", "o", "table", "output: table or json (the broker's reply)")
	f.DurationVar(&o.timeout, "timeout", 30*time.Second, "request timeout")
	// Bad flags are usage errors (exit 2), like bad arguments.
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &codeError{code: exitUsage, err: err} })
}

// check validates the flags before anything is sent.
func (o *opFlags) check() error {
	if o.output != "table" && o.output != "json" {
		return usageErr("-o %q: want table or json", o.output)
	}
	return nil
}

// args wraps a positional-argument rule so its errors are usage errors.
func args(rule cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, a []string) error {
		if err := rule(cmd, a); err != nil {
			return &codeError{code: exitUsage, err: fmt.Errorf("%w\nusage: %s", err, cmd.UseLine())}
		}
		return nil
	}
}

// client returns the Go client (package transport/client) over --server
// with --token, and ctx bounded by --timeout; the flags are checked first.
func (o *opFlags) client(ctx context.Context) (*client.Client, context.Context, context.CancelFunc, error) {
	if err := o.check(); err != nil {
		return nil, nil, nil, err
	}
	if _, err := url.Parse(o.server); err != nil {
		return nil, nil, nil, usageErr("--server %q: %v", o.server, err)
	}
	hc := client.HTTPConfig{URLs: []string{o.server}}
	var err error
	if hc.TLS, err = o.tls.config(); err != nil {
		return nil, nil, nil, usageErr("--ca-file, --client-cert: %v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	return client.NewHTTP(hc, client.AdminToken(o.token)), ctx, cancel, nil
}

// call runs one operator call (what names it in errors) with the client of
// the flags and returns the broker's reply body; a refusal is an error
// (exit 1) naming the status and the broker's error, a broker that does not
// answer an error saying so.
func call[T any](cmd *cobra.Command, o *opFlags, what string, f func(context.Context, *client.Client) (T, []byte, error)) (T, []byte, error) {
	return callCtx(cmd.Context(), o, what, f)
}

// callCtx is call under ctx (each call still bounded by --timeout).
func callCtx[T any](ctx context.Context, o *opFlags, what string, f func(context.Context, *client.Client) (T, []byte, error)) (T, []byte, error) {
	var zero T
	c, ctx, cancel, err := o.client(ctx)
	if err != nil {
		return zero, nil, err
	}
	defer cancel()
	v, raw, err := f(ctx, c)
	var na *client.NoAnswerError
	switch {
	case errors.As(err, &na):
		return zero, nil, fmt.Errorf("%s: %w; is `queen serve` running there? (--server)", what, err)
	case err != nil:
		e := queen.AsError(err)
		return zero, raw, fmt.Errorf("%s: %d %s: %s", what, e.Status, e.Code, e.Message)
	}
	return v, raw, nil
}

// emit prints the broker's JSON reply (-o json), or the table.
func (o *opFlags) emit(cmd *cobra.Command, raw []byte, table func(w io.Writer)) {
	out := cmd.OutOrStdout()
	if o.output == "json" {
		fmt.Fprintln(out, strings.TrimSpace(string(raw)))
		return
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	table(tw)
	tw.Flush()
}

func timeText(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func queuesCmd() *cobra.Command {
	var o opFlags
	cmd := &cobra.Command{
		Use:   "queues [QUEUE]",
		Short: "List the queues, or show one with its effective options",
		Long: `List every queue (partitions, messages, depth of the queue-mode group, main
options), or show one queue (GET /api/v1/resources/queues[/QUEUE]). Exit 1 for a
queue that does not exist.`,
		Example: `  queen queues
  queen queues orders -o json`,
		Args: args(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			if len(a) == 1 {
				if err := checkNames(a[0], "QUEUE"); err != nil {
					return err
				}
				q, raw, err := call(cmd, &o, "queue "+a[0], func(ctx context.Context, c *client.Client) (queen.QueueInfo, []byte, error) {
					return c.Queue(ctx, a[0])
				})
				if err != nil {
					return err
				}
				o.emit(cmd, raw, func(w io.Writer) {
					fmt.Fprintf(w, "queue\t%s\n", q.Name)
					fmt.Fprintf(w, "namespace\t%s\ntask\t%s\n", q.Namespace, q.Task)
					fmt.Fprintf(w, "created\t%s\n", timeText(&q.CreatedAt))
					fmt.Fprintf(w, "partitions\t%d\nmessages\t%d\n", q.Partitions, q.Messages)
					op := q.Options
					fmt.Fprintf(w, "dedupWindowSeconds\t%d\nleaseTime\t%d\nretryLimit\t%d\n", op.DedupWindowSeconds, op.LeaseTime, op.RetryLimit)
					fmt.Fprintf(w, "retentionSeconds\t%d\ncompletedRetentionSeconds\t%d\n", op.RetentionSeconds, op.CompletedRetentionSeconds)
					fmt.Fprintf(w, "delayedProcessing\t%d\nwindowBuffer\t%d\ndedupCheckPayload\t%t\n", op.DelayedProcessing, op.WindowBuffer, op.DedupCheckPayload)
				})
				return nil
			}
			queues, raw, err := call(cmd, &o, "queues", func(ctx context.Context, c *client.Client) ([]queen.QueueSummary, []byte, error) {
				return c.Queues(ctx)
			})
			if err != nil {
				return err
			}
			o.emit(cmd, raw, func(w io.Writer) {
				fmt.Fprintln(w, "QUEUE\tPARTITIONS\tMESSAGES\tDEPTH\tWINDOW(s)\tLEASE(s)\tRETRIES\tRETENTION(s)")
				for _, q := range queues {
					fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", q.Name, q.Partitions, q.Messages, q.Depth,
						q.Options.DedupWindowSeconds, q.Options.LeaseTime, q.Options.RetryLimit, q.Options.RetentionSeconds)
				}
			})
			return nil
		},
	}
	o.register(cmd)
	return cmd
}

func dedupCmd() *cobra.Command {
	var o opFlags
	cmd := &cobra.Command{
		Use:   "dedup QUEUE PARTITION TRANSACTION_ID",
		Short: "The dedup inspector: is this transactionId inside its window, and until when",
		Long: `Ask the dedup inspector (GET /api/v1/dedup, docs/contract.md §13) what the next push of
TRANSACTION_ID to QUEUE/PARTITION would get: in_window (a duplicate, naming the
original message, until windowClosesAt), expired (the sidecar still holds it but
its window has closed) or unknown. Times are PostgreSQL's.

Exit codes: 0 in_window, 3 expired, 4 unknown (the next push is queued for both),
1 error (an unknown queue or partition is one), 2 usage.`,
		Example: `  queen dedup orders o-1 order:1:v1
  if queen dedup orders o-1 order:1:v1 -o json > state.json; then echo duplicate; fi`,
		Args: args(cobra.ExactArgs(3)),
		RunE: func(cmd *cobra.Command, a []string) error {
			if err := checkNames(a[0], "QUEUE", a[1], "PARTITION", a[2], "TRANSACTION_ID"); err != nil {
				return err
			}
			d, raw, err := call(cmd, &o, "dedup", func(ctx context.Context, c *client.Client) (queen.DedupInspection, []byte, error) {
				return c.Dedup(ctx, a[0], a[1], a[2])
			})
			if err != nil {
				return err
			}
			o.emit(cmd, raw, func(w io.Writer) {
				fmt.Fprintf(w, "state\t%s\n", d.State)
				if d.MessageID != nil {
					fmt.Fprintf(w, "messageId\t%s\n", *d.MessageID)
				}
				if d.Offset != nil {
					fmt.Fprintf(w, "offset\t%d\n", *d.Offset)
				}
				if d.CreatedAt != nil {
					fmt.Fprintf(w, "createdAt\t%s\n", timeText(d.CreatedAt))
				}
				fmt.Fprintf(w, "windowSeconds\t%d\n", d.WindowSeconds)
				if d.WindowClosesAt != nil {
					fmt.Fprintf(w, "windowClosesAt\t%s\n", timeText(d.WindowClosesAt))
				}
			})
			switch d.State {
			case queen.InWindow:
				return nil
			case queen.Expired:
				return &codeError{code: exitExpired}
			case queen.Unknown:
				return &codeError{code: exitUnknown}
			}
			return fmt.Errorf("the broker answered the unknown state %q", d.State)
		},
	}
	o.register(cmd)
	return cmd
}

func dlqCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "List dead letters, or replay them onto their partitions",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageErr("queen dlq needs a verb: list or replay (queen dlq --help)")
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &codeError{code: exitUsage, err: err} })
	cmd.AddCommand(dlqListCmd(), dlqReplayCmd())
	return cmd
}

func dlqListCmd() *cobra.Command {
	var o opFlags
	var group, partition string
	var limit int
	cmd := &cobra.Command{
		Use:   "list QUEUE",
		Short: "List a queue's dead letters, oldest first (GET /api/v1/dlq)",
		Example: `  queen dlq list orders
  queen dlq list orders --group billing -o json`,
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			if err := checkNames(a[0], "QUEUE", group, "--group", partition, "--partition"); err != nil {
				return err
			}
			f := queen.DLQFilter{Queue: a[0], ConsumerGroup: group, Partition: partition, Limit: limit}
			l, raw, err := call(cmd, &o, "dlq list", func(ctx context.Context, c *client.Client) (wire.DeadLettersReply, []byte, error) {
				return c.DeadLetters(ctx, f)
			})
			if err != nil {
				return err
			}
			o.emit(cmd, raw, func(w io.Writer) {
				fmt.Fprintln(w, "ID\tGROUP\tPARTITION\tOFFSET\tATTEMPTS\tDEAD AT\tTRANSACTION ID\tERROR")
				for _, d := range l.Messages {
					fmt.Fprintf(w, "%d\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", d.ID, d.ConsumerGroup, d.Partition, d.Offset, d.Attempts,
						timeText(&d.DeadAt), d.TransactionID, oneLine(d.Error, 60))
				}
				if int64(len(l.Messages)) < l.Total {
					fmt.Fprintf(w, "(%d of %d; --limit)\n", len(l.Messages), l.Total)
				}
			})
			return nil
		},
	}
	o.register(cmd)
	f := cmd.Flags()
	f.StringVar(&group, "group", "", "consumer group (default: every group)")
	f.StringVar(&partition, "partition", "", "partition (default: every partition)")
	f.IntVar(&limit, "limit", 100, "most dead letters listed (up to 10000)")
	return cmd
}

func dlqReplayCmd() *cobra.Command {
	var o opFlags
	var group, partition string
	var ids []int64
	var limit int
	cmd := &cobra.Command{
		Use:   "replay QUEUE --group G (--id ID... | --partition P [--limit N])",
		Short: "Push dead letters back onto their partitions (POST /api/v1/dlq/replay)",
		Long: `Replay dead letters of QUEUE and group G (docs/contract.md §13): each is pushed back onto
its partition with its original payload under the transactionId dlq:<id>, so a
second replay is a duplicate. Per dead letter: moved (pushed, removed from the
DLQ), duplicate (already replayed inside the window, its removal lost: kept),
gone (no such dead letter: never existed, or removed by a replay that ran
first; concurrent replays of one letter run one after the other) or failed
(outcome unknown; replaying again is safe).

Exit codes: 0 when nothing failed (moved, duplicate and gone included), 1 when
a dead letter failed or the broker refused the request, 2 usage.`,
		Example: `  queen dlq replay orders --group billing --id 17 --id 18
  queen dlq replay orders --group billing --partition o-1 --limit 50`,
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			f := cmd.Flags()
			if group == "" {
				return usageErr("--group is required")
			}
			if err := checkNames(a[0], "QUEUE", group, "--group", partition, "--partition"); err != nil {
				return err
			}
			body := map[string]any{"queue": a[0], "consumerGroup": group}
			switch {
			case len(ids) > 0 && (f.Changed("partition") || f.Changed("limit")):
				return usageErr("--id excludes --partition and --limit")
			case len(ids) > 0:
				body["ids"] = ids
			case partition != "":
				body["partition"], body["limit"] = partition, limit
			default:
				return usageErr("give --id ID (repeatable) or --partition P [--limit N]")
			}
			r, raw, err := call(cmd, &o, "dlq replay", func(ctx context.Context, c *client.Client) (wire.ReplayReply, []byte, error) {
				return c.Replay(ctx, body)
			})
			if err != nil {
				return err
			}
			o.emit(cmd, raw, func(w io.Writer) {
				fmt.Fprintln(w, "ID\tRESULT\tPARTITION\tTRANSACTION ID\tMESSAGE ID\tERROR")
				for _, x := range r.Results {
					fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\n", x.ID, x.Result, dash(x.Partition), dash(x.TransactionID), dash(x.MessageID), oneLine(x.Error, 60))
				}
			})
			if r.Failed > 0 {
				return &codeError{code: exitError, err: fmt.Errorf("%d dead letters failed to replay (replaying them again is safe)", r.Failed)}
			}
			return nil
		},
	}
	o.register(cmd)
	f := cmd.Flags()
	f.StringVar(&group, "group", "", "consumer group whose dead letters to replay (required)")
	f.Int64SliceVar(&ids, "id", nil, "dead letter id (repeatable, or comma-separated)")
	f.StringVar(&partition, "partition", "", "replay the partition's dead letters, oldest first")
	f.IntVar(&limit, "limit", wire.DefaultReplayLimit, "with --partition: most dead letters replayed (up to 10000)")
	return cmd
}

func clusterCmd() *cobra.Command {
	var o opFlags
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "The cluster's brokers (heartbeats, shards, release, schema version and layout generation) and shard owners (GET /api/v1/cluster)",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, raw, err := call(cmd, &o, "cluster", func(ctx context.Context, c *client.Client) (queen.ClusterView, []byte, error) { return c.Cluster(ctx) })
			if err != nil {
				return err
			}
			owned := map[string][]int{}
			free := 0
			for _, s := range v.Shards {
				if s.Live && s.Owner != "" {
					owned[s.Owner] = append(owned[s.Owner], s.Shard)
				} else {
					free++
				}
			}
			o.emit(cmd, raw, func(w io.Writer) {
				fmt.Fprintf(w, "shards\t%d (%d without a live owner)\n", v.ShardCount, free)
				fmt.Fprintf(w, "answered by\t%s\n\n", v.Self)
				fmt.Fprintln(w, "BROKER\tHTTP\tLIVE\tSHARDS\tHEARTBEAT\tEXPIRES\tRELEASE\tREVISION\tSCHEMA\tLAYOUT\tOWNS")
				for _, b := range v.Brokers {
					fmt.Fprintf(w, "%s\t%s\t%t\t%d\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", b.ID, b.HTTPURL, b.Live, b.Shards,
						timeText(&b.HeartbeatAt), timeText(&b.ExpiresAt),
						dash(b.Release), dash(shortRevision(b.Revision)), schemaText(b.Schema), b.Layout, ranges(owned[b.ID]))
				}
			})
			return nil
		},
	}
	o.register(cmd)
	return cmd
}

func whoamiCmd() *cobra.Command {
	var o opFlags
	cmd := &cobra.Command{
		Use:   "whoami",
		Short: "Who the broker takes --token for: the access control in force (jwt, admin-token, open), the token's sub, role, roles and expiry (GET /api/v1/auth/whoami)",
		Args:  args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			v, raw, err := call(cmd, &o, "whoami", func(ctx context.Context, c *client.Client) (wire.WhoamiReply, []byte, error) { return c.Whoami(ctx) })
			if err != nil {
				return err
			}
			o.emit(cmd, raw, func(w io.Writer) {
				fmt.Fprintf(w, "access\t%s\n", v.Access)
				fmt.Fprintf(w, "sub\t%s\n", dash(v.Sub))
				fmt.Fprintf(w, "role\t%s\n", v.Role)
				fmt.Fprintf(w, "roles\t%s\n", dash(strings.Join(v.Roles, ",")))
				fmt.Fprintf(w, "expires\t%s\n", timeText(v.ExpiresAt))
			})
			return nil
		},
	}
	o.register(cmd)
	cmd.Flags().Lookup("token").Usage = "token sent as Authorization: Bearer: a JWT with JWT_ENABLED, else the admin token (env QUEEN_ADMIN_TOKEN)"
	return cmd
}

// shortRevision keeps the first 12 hex digits of a VCS revision, and its
// "+dirty".
func shortRevision(r string) string {
	hash, suffix, found := strings.Cut(r, "+")
	hash = hash[:min(len(hash), 12)]
	if found {
		return hash + "+" + suffix
	}
	return hash
}

// schemaText is a broker's schema version, "-" for a broker that predates
// the version guard (0).
func schemaText(v int) string {
	if v == 0 {
		return "-"
	}
	return strconv.Itoa(v)
}

// ranges writes shard numbers as "0-15,32,40-41".
func ranges(ns []int) string {
	if len(ns) == 0 {
		return "-"
	}
	sort.Ints(ns)
	var parts []string
	for i := 0; i < len(ns); {
		j := i
		for j+1 < len(ns) && ns[j+1] == ns[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, strconv.Itoa(ns[i]))
		} else {
			parts = append(parts, strconv.Itoa(ns[i])+"-"+strconv.Itoa(ns[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// oneLine shortens s to one line of at most n runes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
