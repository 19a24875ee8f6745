package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/persistence"
	"github.com/queen-mq/queen-go/persistence/localpg"
	qclient "github.com/queen-mq/queen-go/transport/client"
	"github.com/queen-mq/queen-go/transport/wire"
)

func migrateCmd() *cobra.Command {
	var db dbFlags
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply the schema migrations (safe to run twice or from several processes at once)",
		Long: `Apply the schema migrations (safe to run twice or from several processes at once;
` + "`queen serve`" + ` applies them at start too). It refuses, applying nothing, a database
holding migrations this binary does not know (a newer release migrated it: run that
release), and refuses a migration that changes the storage layout while live brokers
of an older layout remain: stop them first (README, Upgrading).`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			url := db.databaseURL
			if url == "" {
				// The managed cluster of the data dir; when a running broker
				// holds it, the URL that broker wrote.
				cluster, err := localpg.Start(ctx, localpg.Config{Holder: "migrate", DataDir: db.dataDir, BinDir: db.pgBin})
				switch {
				case err == nil:
					defer cluster.Stop() //nolint:errcheck
					url = cluster.URL()
				case errors.Is(err, localpg.ErrInUse):
					// A broker holds the cluster; it may still be starting:
					// wait (bounded) for the URL it writes to answer.
					return migrateRunning(ctx, db, err)
				default:
					return err
				}
			}
			applied, err := persistence.Migrate(ctx, url)
			if err != nil {
				return err
			}
			printApplied(applied)
			return nil
		},
	}
	db.register(cmd)
	return cmd
}

// migrateRunning migrates through the URL a running broker wrote, waiting up
// to a minute for a starting broker to write it and its server to answer.
func migrateRunning(ctx context.Context, db dbFlags, inUse error) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		var err error
		if url := db.runningURL(); url != "" {
			var applied []int
			if applied, err = persistence.Migrate(ctx, url); err == nil {
				printApplied(applied)
				return nil
			}
			if refused(err) {
				return err // waiting changes nothing
			}
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = errors.New("it has written no postgres.url")
			}
			return fmt.Errorf("%w; migrating through the running broker's database failed: %v", inUse, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// refused reports a refusal of the version guard (SPEC.md §2): a schema
// newer than this binary, or a layout migration while older brokers live.
func refused(err error) bool {
	var tooNew *persistence.SchemaTooNewError
	var blocked *persistence.LayoutBlockedError
	return errors.As(err, &tooNew) || errors.As(err, &blocked)
}

func printApplied(applied []int) {
	if len(applied) == 0 {
		fmt.Printf("schema is up to date (version %d, layout generation %d)\n", persistence.SchemaVersion(), persistence.LayoutGeneration())
	} else {
		fmt.Printf("applied migrations %v\n", applied)
	}
}

func pushCmd() *cobra.Command {
	var client clientFlags
	var queueName, partition, txn, trace, payload, file string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "push",
		Short: "Push one message (or a {\"items\":[...]} body with --file) and print the verdicts",
		Long: `Push one message, or a whole {"items":[...]} body with --file, and print the reply
(docs/contract.md §3). The broker is reached over NATS at --nats-url (by default where
` + "`queen serve`" + ` puts it with the same environment: NATS_URL, else the embedded server's
QUEEN_NATS_LISTEN, else 127.0.0.1:4222), or over the HTTP gateway with --server URL
(or --via http: http://<QUEEN_HTTP_ADDR>, else http://127.0.0.1:6632). A refused push
exits 1 after printing the broker's reply. The names, --transaction-id and
--trace-id are checked first as the broker checks them (valid UTF-8; no control
characters; names without invisible format or separator characters), and so is a
--file body, whole, by the broker's own decoder (JSON shape, limits, every item's
names and ids; the payload size is left to the broker): a value the broker would
refuse prints the broker's error body (code, field, index) and exits 2, and
nothing is sent; so do a bad flag, an argument, a missing --queue or a --payload
that is not JSON (exit codes as the operator verbs': README, Operator API and CLI).`,
		Example: `  queen push --queue orders --partition o-1 --transaction-id order:1:v1 --payload '{"n":1}'
  queen push --file body.json     # a full push body; - reads standard input
  queen push --nats-url nats://127.0.0.1:5222 --queue orders
  queen push --server http://127.0.0.1:7632 --queue orders`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := client.transport(cmd); err != nil {
				return &codeError{code: exitUsage, err: err}
			}
			var body []byte
			var err error
			if file != "" {
				if file == "-" {
					body, err = io.ReadAll(cmd.InOrStdin())
				} else {
					body, err = os.ReadFile(file)
				}
				if err != nil {
					return err
				}
				// The broker's own decoder and rules (wire.DecodePush:
				// JSON shape, queen.ValidateItem on every item), so a body
				// the broker would refuse is refused here with its code and
				// field, and nothing is sent. The payload size is left to
				// the broker (its QUEEN_MAX_PAYLOAD_BYTES is its own).
				if _, err := wire.DecodePush(body, queen.MaxBodyBytes); err != nil {
					return refusedBeforeSending(cmd, err)
				}
			} else {
				if queueName == "" {
					return usageErr("--queue is required (or --file); nothing was sent")
				}
				if !json.Valid([]byte(payload)) {
					return usageErr("--payload is not valid JSON: %s; nothing was sent", payload)
				}
				items := []qclient.PushItem{{Queue: queueName, Partition: partition, TransactionID: txn, TraceID: trace, Payload: json.RawMessage(payload)}}
				// Checked as the broker checks it, before encoding: JSON
				// would turn invalid UTF-8 into U+FFFD (issue 29).
				if err := qclient.ValidatePushItems(items); err != nil {
					return refusedBeforeSending(cmd, err)
				}
				body = qclient.AppendPushRequest(nil, items)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			r, err := client.request(ctx, cmd, qclient.PushRequest(body))
			if err != nil {
				return fmt.Errorf("push: %w", err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), strings.TrimSpace(string(r.body)))
			if r.status != 0 {
				return fmt.Errorf("push refused (%d): %s", r.status, r.text)
			}
			return nil
		},
	}
	client.register(cmd)
	// Bad flags are usage errors (exit 2), as for the operator verbs.
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &codeError{code: exitUsage, err: err} })
	f := cmd.Flags()
	f.StringVar(&queueName, "queue", "", "queue name")
	f.StringVar(&partition, "partition", "", "partition name (default Default)")
	f.StringVar(&txn, "transaction-id", "", "transaction id (the idempotency key; empty = generated, unique)")
	f.StringVar(&trace, "trace-id", "", "trace id")
	f.StringVar(&payload, "payload", "{}", "payload JSON")
	f.StringVar(&file, "file", "", "read a whole push body from this file (- = stdin)")
	f.DurationVar(&timeout, "timeout", 30*time.Second, "request timeout")
	return cmd
}

// refusedBeforeSending prints err, a *queen.Error from the shared validator,
// as the broker's error body and returns the command's error, a usage error
// (exit 2): the request was refused by the same rule the broker applies,
// and nothing was sent.
func refusedBeforeSending(cmd *cobra.Command, err error) error {
	e := queen.AsError(err)
	b, _ := json.Marshal(e)
	fmt.Fprintln(cmd.OutOrStdout(), string(b))
	return &codeError{code: exitUsage, err: fmt.Errorf("push refused before sending (%d %s): %s; nothing was sent", e.Status, e.Code, e.Message)}
}
