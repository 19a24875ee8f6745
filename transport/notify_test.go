package transport

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	queen "github.com/queen-mq/queen-go"
)

// wakes records what a Notifier passes to its Waker.
type wakes struct {
	mu  sync.Mutex
	got map[string]map[uuid.UUID]int
}

func (w *wakes) Notify(queue string, pids []uuid.UUID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.got == nil {
		w.got = map[string]map[uuid.UUID]int{}
	}
	if w.got[queue] == nil {
		w.got[queue] = map[uuid.UUID]int{}
	}
	for _, p := range pids {
		w.got[queue][p]++
	}
}

func (w *wakes) count(queue string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.got[queue])
}

func natsConn(t *testing.T) *nats.Conn {
	t.Helper()
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoSigs: true, NoLog: true})
	require.NoError(t, err)
	srv.Start()
	t.Cleanup(srv.Shutdown)
	require.True(t, srv.ReadyForConnections(10*time.Second))
	nc, err := nats.Connect(srv.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}

// TestNotifierGathersNotices: polls here wake at once; the other brokers
// get the notices gathered, one message per queue with every partition
// once, and a broker ignores its own messages.
func TestNotifierGathersNotices(t *testing.T) {
	nc := natsConn(t)
	log := slog.New(slog.DiscardHandler)
	var here, there wakes
	a, out := startNotifier(t, AnnouncerConfig{Conn: nc, Logger: log, Linger: time.Hour}, &here) // published by Stop only
	startNotifier(t, AnnouncerConfig{Conn: nc, Logger: log}, &there)
	var msgs sync.Map
	raw, err := nc.Subscribe(SubjectNotify, func(m *nats.Msg) { msgs.Store(string(m.Data), true) })
	require.NoError(t, err)
	t.Cleanup(func() { raw.Unsubscribe() }) //nolint:errcheck

	pids := make([]uuid.UUID, 50)
	for i := range pids {
		pids[i] = uuid.New()
	}
	for round := 0; round < 20; round++ {
		a.Available("q", pids[round%10:round%10+5])
		a.Available("r", pids[40:])
	}
	require.Equal(t, 14, here.count("q"), "local polls wake at once")
	require.Zero(t, there.count("q"), "nothing published before the linger ends")

	require.NoError(t, a.Stop(context.Background()))
	require.NoError(t, out.Stop(context.Background())) // publishes what was gathered
	require.Eventually(t, func() bool { return there.count("q") == 14 && there.count("r") == 10 }, 10*time.Second, 5*time.Millisecond)
	require.Eventually(t, func() bool {
		n := 0
		msgs.Range(func(any, any) bool { n++; return true })
		return n == 2
	}, 10*time.Second, 5*time.Millisecond, "one message per queue")
	there.mu.Lock()
	for p, c := range there.got["q"] {
		require.Equal(t, 1, c, "partition %s once", p)
	}
	there.mu.Unlock()
	here.mu.Lock()
	for p, c := range here.got["r"] {
		require.Equal(t, 20, c, "partition %s: one local wake per notice, its own message ignored", p)
	}
	here.mu.Unlock()

	// After its Announcer's Stop: local wakes only.
	a.Available("s", pids[:1])
	require.Equal(t, 1, here.count("s"))
	require.NoError(t, nc.Flush())
	require.Zero(t, there.count("s"))

	// With the default linger the notices reach the other broker unprompted.
	var own wakes
	c, cOut := startNotifier(t, AnnouncerConfig{Conn: nc, Logger: log}, &own)
	c.Available("t", pids[:3])
	require.Eventually(t, func() bool { return there.count("t") == 3 }, 10*time.Second, 5*time.Millisecond)
	// An announcement alone (the pop coordinator's, which woke its own
	// polls) reaches the other brokers and wakes nothing here.
	cOut.Announce("u", pids[:2])
	require.Eventually(t, func() bool { return there.count("u") == 2 }, 10*time.Second, 5*time.Millisecond)
	require.Zero(t, own.count("u"))
}

// TestNotifierPushedWakesQueuedPartitions: only queued items wake, grouped
// by queue.
func TestNotifierPushedWakesQueuedPartitions(t *testing.T) {
	nc := natsConn(t)
	var here wakes
	n, _ := startNotifier(t, AnnouncerConfig{Conn: nc, Logger: slog.New(slog.DiscardHandler)}, &here)
	p1, p2, p3 := uuid.New(), uuid.New(), uuid.New()
	items := []*queen.Item{{Queue: "a"}, {Queue: "b"}, {Queue: "a"}, {Queue: "a"}, {Queue: "c"}}
	results := []queen.Result{
		{Verdict: queen.Queued, PartitionID: p1}, {Verdict: queen.Queued, PartitionID: p2},
		{Verdict: queen.Queued, PartitionID: p3}, {Verdict: queen.Duplicate, PartitionID: p2}, {Verdict: queen.Failed},
	}
	n.Pushed(items, results)
	here.mu.Lock()
	defer here.mu.Unlock()
	require.Equal(t, map[string]map[uuid.UUID]int{"a": {p1: 1, p3: 1}, "b": {p2: 1}}, here.got)
}

// startNotifier starts a Notifier waking local on an Announcer of cfg;
// both stop with the test.
func startNotifier(t *testing.T, cfg AnnouncerConfig, local Waker) (*Notifier, *Announcer) {
	t.Helper()
	a, err := NewAnnouncer(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { a.Stop(context.Background()) }) //nolint:errcheck
	n, err := NewNotifier(NotifierConfig{Announcer: a, Local: local})
	require.NoError(t, err)
	require.NoError(t, n.Start(context.Background()))
	t.Cleanup(func() { n.Stop(context.Background()) }) //nolint:errcheck
	return n, a
}
