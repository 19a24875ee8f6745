package main

// queen tail (issue 14): the last messages of a queue, then, with --follow,
// new ones as they are stored, through the read-only peek route
// (GET /api/v1/queues/{queue}/messages): no lease, no ack, no cursor moved.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/spf13/cobra"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/transport/client"
)

// tailLine is one message of `queen tail -o json` (one JSON object per
// line): the peek's message, its queue and, with --group, that group's
// cursor and lag in the message's partition and whether the group has
// consumed the message (offset at or below the cursor).
type tailLine struct {
	Queue string `json:"queue"`
	queen.PeekMessage
	ConsumerGroup string `json:"consumerGroup,omitempty"`
	Cursor        *int64 `json:"cursor,omitempty"`
	Lag           *int64 `json:"lag,omitempty"`
	Consumed      *bool  `json:"consumed,omitempty"`
}

// tailer holds one `queen tail` run.
type tailer struct {
	o         *opFlags
	queue     string
	partition string // "" = every partition
	group     string
	out       io.Writer
	// seen is the highest offset printed or skipped per partition: a
	// follow poll asks for the messages above it.
	seen map[string]int64
	// cursors is the group's cursor per partition (absent: not popped
	// there yet); shown is the group line last printed per partition.
	cursors map[string]queen.GroupCursor
	shown   map[string]string
	// widths of the table's partition and transactionId columns, fixed by
	// the first rows printed so a stream stays aligned.
	pw, tw int
	header bool
}

func tailCmd() *cobra.Command {
	var o opFlags
	var partition, group string
	var follow bool
	var n int
	var interval time.Duration
	cmd := &cobra.Command{
		Use:   "tail QUEUE [--partition P] [--follow] [--group G] [-n N] [-o table|json]",
		Short: "Print a queue's last messages, and with --follow new ones as they are stored (read-only)",
		Long: `Print the last N messages of QUEUE (every partition, or --partition P), oldest
first, then with --follow poll for new ones every --interval and print them as they
are stored, until Ctrl-C. It reads through the peek route
(GET /api/v1/queues/{queue}/messages): nothing is leased, acked or moved, so
consumers still get every message.

Across partitions the last N are the newest N by stored time (PostgreSQL's
clock); within a partition messages come in offset order. A partition created
while following is printed from its first message.

--group G does not consume as G: it shows G's cursor and lag beside the
messages (a "# group" line per partition, repeated when they change, and a
column saying whether G has consumed each message: "done" at or below its
cursor, "pending" above, "-" where G has not popped the partition yet). With -o
json every message is one JSON object per line (queue, partition, offset, id,
transactionId, traceId, createdAt, data; with --group also consumerGroup,
cursor, lag, consumed).

Exit codes: 0 done (Ctrl-C ends --follow with 0), 1 the broker refused a
request (an unknown queue or partition is one, 401 without the admin token) or
could not be reached, 2 usage.`,
		Example: `  queen tail orders
  queen tail orders --partition o-1 -n 50 -o json
  queen tail orders --follow --group billing`,
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			if err := o.check(); err != nil {
				return err
			}
			if n < 0 || n > queen.MaxPeekLimit {
				return usageErr("-n %d: want 0 to %d", n, queen.MaxPeekLimit)
			}
			if interval < 10*time.Millisecond {
				return usageErr("--interval %s: want at least 10ms", interval)
			}
			if err := queen.ValidateName(a[0], "QUEUE"); err != nil {
				return usageErr("%v", err)
			}
			for _, v := range []struct{ v, name string }{{partition, "--partition"}, {group, "--group"}} {
				if v.v != "" {
					if err := queen.ValidateName(v.v, v.name); err != nil {
						return usageErr("%v", err)
					}
				}
			}
			t := &tailer{o: &o, queue: a[0], partition: partition, group: group, out: cmd.OutOrStdout(),
				seen: map[string]int64{}, cursors: map[string]queen.GroupCursor{}, shown: map[string]string{}}
			return t.run(cmd.Context(), n, follow, interval)
		},
	}
	o.register(cmd)
	f := cmd.Flags()
	f.StringVar(&partition, "partition", "", "one partition (default: every partition of the queue)")
	f.StringVar(&group, "group", "", "show this consumer group's cursor and lag beside the messages (nothing is consumed)")
	f.BoolVarP(&follow, "follow", "f", false, "keep polling and print new messages as they are stored, until Ctrl-C")
	f.IntVarP(&n, "lines", "n", 10, "how many of the last messages to print first (0 to 1000)")
	f.DurationVar(&interval, "interval", time.Second, "with --follow: time between polls")
	return cmd
}

// run prints the last n messages, then follows when asked. A canceled
// context (Ctrl-C) ends a follow without error.
func (t *tailer) run(ctx context.Context, n int, follow bool, interval time.Duration) error {
	stopped := func(err error) error { // Ctrl-C while following is no error
		if follow && ctx.Err() != nil {
			return nil
		}
		return err
	}
	last, err := t.lastOffsets(ctx)
	if err != nil {
		return stopped(err)
	}
	var batch []queen.PeekMessage
	for _, p := range sortedNames(last) {
		after := max(last[p]-int64(n), -1)
		t.seen[p] = after
		if n == 0 || last[p] <= after {
			continue
		}
		msgs, err := t.fetch(ctx, p, n)
		if err != nil {
			return stopped(err)
		}
		batch = append(batch, msgs...)
	}
	// The newest n across partitions, printed oldest first.
	sortMessages(batch)
	if len(batch) > n {
		batch = batch[len(batch)-n:]
	}
	t.print(batch)
	if !follow {
		return nil
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		last, err := t.lastOffsets(ctx)
		if err != nil {
			return stopped(err)
		}
		batch = batch[:0]
		for _, p := range sortedNames(last) {
			seen, ok := t.seen[p]
			if !ok {
				seen = -1 // a partition created since: from its first message
				t.seen[p] = seen
			}
			if last[p] <= seen {
				continue
			}
			msgs, err := t.fetch(ctx, p, 0)
			if err != nil {
				return stopped(err)
			}
			batch = append(batch, msgs...)
		}
		sortMessages(batch)
		t.print(batch)
	}
}

// lastOffsets returns the last offset of every partition in scope, and
// refreshes the group's cursors when --group is set. With --partition it
// asks the peek route (one message; 404 for an unknown partition) unless
// the queue detail is needed anyway for the group.
func (t *tailer) lastOffsets(ctx context.Context) (map[string]int64, error) {
	out := map[string]int64{}
	if t.partition == "" || t.group != "" {
		d, _, err := callCtx(ctx, t.o, "queue detail "+t.queue, func(ctx context.Context, c *client.Client) (queen.QueueDetail, []byte, error) {
			return c.QueueDetail(ctx, t.queue)
		})
		if err != nil {
			return nil, err
		}
		for _, p := range d.Partitions {
			if t.partition == "" || p.Name == t.partition {
				out[p.Name] = p.LastOffset
			}
		}
		clear(t.cursors)
		for _, g := range d.ConsumerGroups {
			if g.ConsumerGroup == t.group {
				for _, c := range g.Cursors {
					t.cursors[c.Partition] = c
				}
			}
		}
		if t.partition == "" {
			return out, nil
		}
		if _, ok := out[t.partition]; ok {
			return out, nil
		}
	}
	res, err := t.peek(ctx, t.partition, -1, 1) // 404 for an unknown partition
	if err != nil {
		return nil, err
	}
	out[t.partition] = res.LastOffset
	return out, nil
}

// fetch returns partition p's messages above t.seen[p] (at most limit; 0 =
// every one stored), in offset order, and moves t.seen[p] past them.
func (t *tailer) fetch(ctx context.Context, p string, limit int) ([]queen.PeekMessage, error) {
	var out []queen.PeekMessage
	for {
		page := queen.MaxPeekLimit
		if limit > 0 {
			page = min(page, limit-len(out))
		}
		res, err := t.peek(ctx, p, t.seen[p], page)
		if err != nil {
			return nil, err
		}
		out = append(out, res.Messages...)
		if len(res.Messages) > 0 {
			t.seen[p] = res.Messages[len(res.Messages)-1].Offset
		} else if res.LastOffset > t.seen[p] {
			t.seen[p] = res.LastOffset // the rest was removed by retention
		}
		if len(res.Messages) < page || (limit > 0 && len(out) >= limit) {
			return out, nil
		}
	}
}

func (t *tailer) peek(ctx context.Context, p string, after int64, limit int) (queen.PeekResult, error) {
	res, _, err := callCtx(ctx, t.o, "peek "+t.queue+"/"+p, func(ctx context.Context, c *client.Client) (queen.PeekResult, []byte, error) {
		return c.Peek(ctx, queen.PeekQuery{Queue: t.queue, Partition: p, After: after, Limit: limit})
	})
	return res, err
}

// print writes messages (and, with --group, the group lines that changed).
func (t *tailer) print(msgs []queen.PeekMessage) {
	if t.o.output == "json" {
		enc := json.NewEncoder(t.out)
		for _, m := range msgs {
			line := tailLine{Queue: t.queue, PeekMessage: m}
			if t.group != "" {
				line.ConsumerGroup = t.group
				if c, ok := t.cursors[m.Partition]; ok {
					cur, lag, done := c.Cursor, c.Lag, m.Offset <= c.Cursor
					line.Cursor, line.Lag, line.Consumed = &cur, &lag, &done
				}
			}
			enc.Encode(line) //nolint:errcheck // standard output went away
		}
		return
	}
	if t.group != "" {
		for _, p := range sortedNames(t.seen) {
			line := fmt.Sprintf("# group %s partition %s: not popped yet\n", t.group, p)
			if c, ok := t.cursors[p]; ok {
				line = fmt.Sprintf("# group %s partition %s: cursor %d, lag %d\n", t.group, p, c.Cursor, c.Lag)
			}
			if t.shown[p] != line {
				io.WriteString(t.out, line) //nolint:errcheck // standard output went away
				t.shown[p] = line
			}
		}
	}
	if len(msgs) == 0 {
		return
	}
	if !t.header {
		t.pw, t.tw = len("PARTITION"), len("TRANSACTION ID")
		for _, m := range msgs {
			t.pw = max(t.pw, min(len(m.Partition), 40))
			t.tw = max(t.tw, min(len(m.TransactionID), 40))
		}
		g := ""
		if t.group != "" {
			g = fmt.Sprintf("%-8s ", "GROUP")
		}
		fmt.Fprintf(t.out, "%-*s %8s %s%-24s %-36s %-*s %s\n", t.pw, "PARTITION", "OFFSET", g, "CREATED", "MESSAGE ID", t.tw, "TRANSACTION ID", "PAYLOAD")
		t.header = true
	}
	for _, m := range msgs {
		g := ""
		if t.group != "" {
			state := "-"
			if c, ok := t.cursors[m.Partition]; ok {
				state = "pending"
				if m.Offset <= c.Cursor {
					state = "done"
				}
			}
			g = fmt.Sprintf("%-8s ", state)
		}
		fmt.Fprintf(t.out, "%-*s %8d %s%-24s %-36s %-*s %s\n", t.pw, m.Partition, m.Offset, g,
			m.CreatedAt.UTC().Format("2006-01-02T15:04:05.000Z"), m.ID, t.tw, oneLine(m.TransactionID, 40), oneLine(string(m.Data), 80))
	}
}

// sortMessages orders messages by stored time, then partition and offset.
func sortMessages(ms []queen.PeekMessage) {
	sort.SliceStable(ms, func(i, j int) bool {
		a, b := ms[i], ms[j]
		if !a.CreatedAt.Equal(b.CreatedAt) {
			return a.CreatedAt.Before(b.CreatedAt)
		}
		if a.Partition != b.Partition {
			return a.Partition < b.Partition
		}
		return a.Offset < b.Offset
	})
}

func sortedNames[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
