package transport

import (
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	queen "github.com/queen-mq/queen-go"
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
	sub    *nats.Subscription
	log    *slog.Logger

	mu sync.Mutex
	// pending is the partitions to publish per queue, in first-notice
	// order without repeats; armed: a publish is scheduled; stopped: no
	// more publishing.
	pending map[string][]uuid.UUID
	seen    map[string]map[uuid.UUID]struct{}
	armed   bool
	stopped bool
	timer   *time.Timer
	// linger is NotifyLinger (tests set it longer).
	linger time.Duration
}

type notifyMsg struct {
	Origin     string      `json:"origin"`
	Queue      string      `json:"queue"`
	Partitions []uuid.UUID `json:"partitions"`
}

// NewNotifier subscribes to SubjectNotify on nc and passes other brokers'
// notices to local.
func NewNotifier(nc *nats.Conn, local Waker, log *slog.Logger) (*Notifier, error) {
	n := &Notifier{nc: nc, local: local, origin: uuid.NewString(), log: log, linger: NotifyLinger}
	sub, err := nc.Subscribe(SubjectNotify, func(m *nats.Msg) {
		var in notifyMsg
		if err := json.Unmarshal(m.Data, &in); err != nil || in.Origin == n.origin {
			return
		}
		local.Notify(in.Queue, in.Partitions)
	})
	if err != nil {
		return nil, err
	}
	n.sub = sub
	return n, nc.Flush()
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
// notices wake this broker's polls only.
func (n *Notifier) Stop() {
	n.mu.Lock()
	n.stopped = true
	if n.timer != nil {
		n.timer.Stop()
	}
	n.mu.Unlock()
	n.flush()
	if n.sub != nil {
		n.sub.Unsubscribe() //nolint:errcheck
	}
}
