package transport

import (
	"encoding/json"
	"log/slog"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	queen "github.com/queen-mq/queen-go"
)

// SubjectNotify carries "new messages in these partitions" between brokers,
// so a long poll parked on one broker wakes when a push commits on another
// (SPEC.md §4). Every broker subscribes (no queue group).
const SubjectNotify = "queen.v1.notify"

// Waker is told of partitions with new messages (actors.Consumers).
type Waker interface {
	Notify(queue string, pids []uuid.UUID)
}

// Notifier wakes long polls here and, over NATS, on every other broker.
type Notifier struct {
	nc     *nats.Conn
	local  Waker
	origin string
	sub    *nats.Subscription
	log    *slog.Logger
}

type notifyMsg struct {
	Origin     string      `json:"origin"`
	Queue      string      `json:"queue"`
	Partitions []uuid.UUID `json:"partitions"`
}

// NewNotifier subscribes to SubjectNotify on nc and passes other brokers'
// notices to local.
func NewNotifier(nc *nats.Conn, local Waker, log *slog.Logger) (*Notifier, error) {
	n := &Notifier{nc: nc, local: local, origin: uuid.NewString(), log: log}
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

// Available wakes the polls of queue for partitions pids, here and elsewhere.
func (n *Notifier) Available(queue string, pids []uuid.UUID) {
	n.local.Notify(queue, pids)
	n.publish(queue, pids)
}

func (n *Notifier) publish(queue string, pids []uuid.UUID) {
	b, _ := json.Marshal(notifyMsg{Origin: n.origin, Queue: queue, Partitions: pids})
	if err := n.nc.Publish(SubjectNotify, b); err != nil {
		n.log.Debug("notify publish failed", "err", err)
	}
}

// Pushed is a transport.Config.OnPushed hook: it wakes the polls of every
// queue that got a queued item.
func (n *Notifier) Pushed(items []*queen.Item, results []queen.Result) {
	var byQueue map[string][]uuid.UUID
	for i, r := range results {
		if r.Verdict != queen.Queued {
			continue
		}
		if byQueue == nil {
			byQueue = map[string][]uuid.UUID{}
		}
		q := items[i].Queue
		pids := byQueue[q]
		if len(pids) == 0 || pids[len(pids)-1] != r.PartitionID {
			byQueue[q] = append(pids, r.PartitionID)
		}
	}
	for q, pids := range byQueue {
		n.Available(q, pids)
	}
}

// Stop unsubscribes.
func (n *Notifier) Stop() {
	if n.sub != nil {
		n.sub.Unsubscribe() //nolint:errcheck
	}
}
