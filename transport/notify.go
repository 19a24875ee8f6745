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

// Announcer publishes this broker's notices to the other brokers on
// SubjectNotify: the partitions announced for a queue within NotifyLinger
// go as one message per queue, each partition once. It wakes nothing on
// this broker. The pop coordinator announces through it the partitions a
// retry ack made deliverable again (consume.Options.OnAvailable), having
// woken its own polls; the Notifier built on it wakes this broker's polls
// and hears the other brokers'.
type Announcer struct {
	nc     *nats.Conn
	origin string
	log    *slog.Logger
	// linger is AnnouncerConfig.Linger.
	linger time.Duration

	mu sync.Mutex
	// pending is the partitions to publish per queue, in first-notice
	// order without repeats; armed: a publish is scheduled; stopped: no
	// more publishing.
	pending map[string][]uuid.UUID
	seen    map[string]map[uuid.UUID]struct{}
	armed   bool
	stopped bool
	timer   *time.Timer
}

type notifyMsg struct {
	Origin     string      `json:"origin"`
	Queue      string      `json:"queue"`
	Partitions []uuid.UUID `json:"partitions"`
}

// AnnouncerConfig configures an Announcer. Zero values take the defaults
// named.
type AnnouncerConfig struct {
	// Conn carries SubjectNotify (required).
	Conn *nats.Conn
	// Linger is how long notices are gathered before they are published to
	// the other brokers; default NotifyLinger (2 ms).
	Linger time.Duration
	// Logger gets failed publishes (debug); default slog.Default().
	Logger *slog.Logger
}

// NewAnnouncer returns an Announcer that publishes from now on until
// stopped. It refuses (a *lifecycle.SettingError) a missing Conn and a
// negative Linger.
func NewAnnouncer(cfg AnnouncerConfig) (*Announcer, error) {
	if err := errors.Join(
		lifecycle.Required("AnnouncerConfig.Conn", cfg.Conn == nil),
		lifecycle.NotNegative("AnnouncerConfig.Linger", cfg.Linger),
	); err != nil {
		return nil, fmt.Errorf("transport: %w", err)
	}
	return &Announcer{nc: cfg.Conn, origin: uuid.NewString(), log: cmp.Or(cfg.Logger, slog.Default()),
		linger: cmp.Or(cfg.Linger, NotifyLinger)}, nil
}

// Start does nothing: an Announcer publishes from NewAnnouncer on. It is
// there so the Announcer has the lifecycle every service has
// (lifecycle.Service).
func (a *Announcer) Start(context.Context) error { return nil }

// Announce publishes partitions pids of queue to the other brokers within
// NotifyLinger; after Stop it does nothing.
func (a *Announcer) Announce(queue string, pids []uuid.UUID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stopped {
		return
	}
	if a.pending == nil {
		a.pending, a.seen = map[string][]uuid.UUID{}, map[string]map[uuid.UUID]struct{}{}
	}
	seen := a.seen[queue]
	if seen == nil {
		seen = map[uuid.UUID]struct{}{}
		a.seen[queue] = seen
	}
	for _, p := range pids {
		if _, ok := seen[p]; !ok {
			seen[p] = struct{}{}
			a.pending[queue] = append(a.pending[queue], p)
		}
	}
	if !a.armed {
		a.armed = true
		if a.timer == nil {
			a.timer = time.AfterFunc(a.linger, a.flush)
		} else {
			a.timer.Reset(a.linger)
		}
	}
}

// flush publishes the notices gathered, one message per queue.
func (a *Announcer) flush() {
	a.mu.Lock()
	pending := a.pending
	a.pending, a.seen, a.armed = nil, nil, false
	a.mu.Unlock()
	for q, pids := range pending {
		b, _ := json.Marshal(notifyMsg{Origin: a.origin, Queue: q, Partitions: pids})
		if err := a.nc.Publish(SubjectNotify, b); err != nil {
			a.log.Debug("notify publish failed", "err", err)
		}
	}
}

// Stop publishes the notices still gathered; later ones are not
// published. Safe to call more than once; it does not wait, so ctx is
// unused.
func (a *Announcer) Stop(context.Context) error {
	a.mu.Lock()
	a.stopped = true
	if a.timer != nil {
		a.timer.Stop()
	}
	a.mu.Unlock()
	a.flush()
	return nil
}

// Notifier wakes long polls here and, through its Announcer, on every
// other broker; started, it passes the other brokers' notices to Local.
type Notifier struct {
	out   *Announcer
	local Waker

	mu  sync.Mutex
	sub *nats.Subscription // set by Start
}

// NotifierConfig configures a Notifier.
type NotifierConfig struct {
	// Announcer publishes this broker's notices to the other brokers
	// (required); the Notifier hears theirs on its connection and ignores
	// its own.
	Announcer *Announcer
	// Local is woken by every notice, this broker's and the others'
	// (required).
	Local Waker
}

// NewNotifier returns a Notifier that wakes Local and announces this
// broker's notices but hears the other brokers' only once started. It
// refuses (a *lifecycle.SettingError) a missing Announcer or Local.
func NewNotifier(cfg NotifierConfig) (*Notifier, error) {
	if err := errors.Join(
		lifecycle.Required("NotifierConfig.Announcer", cfg.Announcer == nil),
		lifecycle.Required("NotifierConfig.Local", cfg.Local == nil),
	); err != nil {
		return nil, fmt.Errorf("transport: %w", err)
	}
	return &Notifier{out: cfg.Announcer, local: cfg.Local}, nil
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
	nc, origin := n.out.nc, n.out.origin
	sub, err := nc.Subscribe(SubjectNotify, func(m *nats.Msg) {
		var in notifyMsg
		if err := json.Unmarshal(m.Data, &in); err != nil || in.Origin == origin {
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
	return nc.Flush()
}

// Available wakes the polls of queue for partitions pids here at once, and
// on the other brokers within NotifyLinger (Announcer.Announce).
func (n *Notifier) Available(queue string, pids []uuid.UUID) {
	n.local.Notify(queue, pids)
	n.out.Announce(queue, pids)
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

// Stop unsubscribes: the other brokers' notices no longer reach Local.
// Its Announcer stops on its own (Announcer.Stop); until then this
// broker's notices are still announced. Safe to call more than once, and
// before Start; it does not wait, so ctx is unused.
func (n *Notifier) Stop(context.Context) error {
	n.mu.Lock()
	sub := n.sub
	n.mu.Unlock()
	if sub != nil {
		sub.Unsubscribe() //nolint:errcheck
	}
	return nil
}
