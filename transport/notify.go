package transport

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/lifecycle"
)

// SubjectNotify carries "new messages in these partitions" between brokers,
// so a long poll parked on one broker wakes when a push commits on another
// (SPEC.md §4). Every broker subscribes (no queue group).
const SubjectNotify = "queen.v1.notify"

// Waker is told of partitions with new messages (consume.Coordinator).
type Waker interface {
	Notify(queue string, pids []uuid.UUID)
}

// NotifyLinger is how long a Notifier gathers notices before it publishes
// them to the other brokers, as one message per queue: a push no longer
// costs a NATS message of its own (at one item per request that message
// was as much NATS traffic as the request), and a long poll on another
// broker wakes at most this much later. Polls on this broker wake at once.
const NotifyLinger = 2 * time.Millisecond

// Notifier wakes long polls here and, over NATS, on every other broker.
type Notifier struct {
	nc     *nats.Conn
	local  Waker
	origin string
	log    *slog.Logger

	mu  sync.Mutex
	sub *nats.Subscription // set by Start
	// pending is the partitions to publish per queue, in first-notice
	// order without repeats; armed: a publish is scheduled; stopped: no
	// more publishing.
	pending map[string][]uuid.UUID
	seen    map[string]map[uuid.UUID]struct{}
	armed   bool
	stopped bool
	timer   *time.Timer
	// linger is NotifierConfig.Linger.
	linger time.Duration
}

type notifyMsg struct {
	Origin     string      `json:"origin"`
	Queue      string      `json:"queue"`
	Partitions []uuid.UUID `json:"partitions"`
}

// NotifierConfig configures a Notifier. Zero values take the defaults named.
type NotifierConfig struct {
	// Conn carries SubjectNotify (required).
	Conn *nats.Conn
	// Local is woken by every notice, this broker's and the others'
	// (required).
	Local Waker
	// Linger is how long notices are gathered before they are published to
	// the other brokers; default NotifyLinger (2 ms).
	Linger time.Duration
	// Logger gets failed publishes (debug); default slog.Default().
	Logger *slog.Logger
}

// NewNotifier returns a Notifier that publishes this broker's notices but
// hears the other brokers' only once started. It refuses (a
// *lifecycle.SettingError) a missing Conn or Local and a negative Linger.
func NewNotifier(cfg NotifierConfig) (*Notifier, error) {
	if err := errors.Join(
		lifecycle.Required("NotifierConfig.Conn", cfg.Conn == nil),
		lifecycle.Required("NotifierConfig.Local", cfg.Local == nil),
		lifecycle.NotNegative("NotifierConfig.Linger", cfg.Linger),
	); err != nil {
		return nil, fmt.Errorf("transport: %w", err)
	}
	return &Notifier{nc: cfg.Conn, local: cfg.Local, origin: uuid.NewString(),
		log: cmp.Or(cfg.Logger, slog.Default()), linger: cmp.Or(cfg.Linger, NotifyLinger)}, nil
}

// Start subscribes to SubjectNotify and passes the other brokers' notices
// to Local; it returns once the server has the subscription. A second
// Start does nothing.
func (n *Notifier) Start(context.Context) error {
	n.mu.Lock()
	if n.sub != nil {
		n.mu.Unlock()
		return nil
	}
	sub, err := n.nc.Subscribe(SubjectNotify, func(m *nats.Msg) {
		var in notifyMsg
		if err := json.Unmarshal(m.Data, &in); err != nil || in.Origin == n.origin {
			return
		}
		n.local.Notify(in.Queue, in.Partitions)
	})
	if err == nil {
		n.sub = sub
	}
	n.mu.Unlock()
	if err != nil {
		return fmt.Errorf("transport: subscribe to %s: %w", SubjectNotify, err)
	}
	return n.nc.Flush()
}

// Available wakes the polls of queue for partitions pids here at once, and
// on the other brokers within NotifyLinger.
func (n *Notifier) Available(queue string, pids []uuid.UUID) {
	n.local.Notify(queue, pids)
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stopped {
		return
	}
	if n.pending == nil {
		n.pending, n.seen = map[string][]uuid.UUID{}, map[string]map[uuid.UUID]struct{}{}
	}
	seen := n.seen[queue]
	if seen == nil {
		seen = map[uuid.UUID]struct{}{}
		n.seen[queue] = seen
	}
	for _, p := range pids {
		if _, ok := seen[p]; !ok {
			seen[p] = struct{}{}
			n.pending[queue] = append(n.pending[queue], p)
		}
	}
	if !n.armed {
		n.armed = true
		if n.timer == nil {
			n.timer = time.AfterFunc(n.linger, n.flush)
		} else {
			n.timer.Reset(n.linger)
		}
	}
}

// flush publishes the notices gathered, one message per queue.
func (n *Notifier) flush() {
	n.mu.Lock()
	pending := n.pending
	n.pending, n.seen, n.armed = nil, nil, false
	n.mu.Unlock()
	for q, pids := range pending {
		b, _ := json.Marshal(notifyMsg{Origin: n.origin, Queue: q, Partitions: pids})
		if err := n.nc.Publish(SubjectNotify, b); err != nil {
			n.log.Debug("notify publish failed", "err", err)
		}
	}
}

// Pushed is a transport.Config.OnPushed hook: it wakes the polls of every
// queue that got a queued item. A request's items are grouped by queue
// without a map (most requests push to one queue or a few).
func (n *Notifier) Pushed(items []*queen.Item, results []queen.Result) {
	type group struct {
		queue string
		pids  []uuid.UUID
	}
	var groups []group
	for i, r := range results {
		if r.Verdict != queen.Queued {
			continue
		}
		q := items[i].Queue
		g := -1
		for k := range groups {
			if groups[k].queue == q {
				g = k
				break
			}
		}
		if g < 0 {
			groups = append(groups, group{queue: q})
			g = len(groups) - 1
		}
		if pids := groups[g].pids; len(pids) == 0 || pids[len(pids)-1] != r.PartitionID {
			groups[g].pids = append(pids, r.PartitionID)
		}
	}
	for _, g := range groups {
		n.Available(g.queue, g.pids)
	}
}

// Stop publishes the notices still gathered and unsubscribes; later
// notices wake this broker's polls only. Safe to call more than once, and
// before Start; it does not wait, so ctx is unused.
func (n *Notifier) Stop(context.Context) error {
	n.mu.Lock()
	n.stopped = true
	if n.timer != nil {
		n.timer.Stop()
	}
	sub := n.sub
	n.mu.Unlock()
	n.flush()
	if sub != nil {
		sub.Unsubscribe() //nolint:errcheck
	}
	return nil
}
