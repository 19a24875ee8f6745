package shards

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/lifecycle"
)

// LeaseStore keeps the cluster's broker heartbeats and shard leases on
// PostgreSQL's clock (persistence.Store).
type LeaseStore interface {
	// ClaimShards heartbeats broker id (live for lease) and, in one
	// statement, renews its leases up to its fair share ceil(shards / live
	// brokers), frees the surplus and claims free or expired shards up to
	// that share, advertising httpURL and build (its Layout is what a layout
	// migration checks, SPEC.md §2). It returns the shards held afterwards
	// and the newly taken.
	ClaimShards(ctx context.Context, id uuid.UUID, httpURL string, build queen.Build, lease time.Duration) (held, taken []int, err error)
	// ReleaseShards frees every lease of broker id and removes its row.
	ReleaseShards(ctx context.Context, id uuid.UUID) (int, error)
	// ClusterState reads the brokers and every lease.
	ClusterState(ctx context.Context) (queen.ClusterView, error)
}

// DefaultLease is the default shard lease (QUEEN_SHARD_LEASE).
const DefaultLease = 10 * time.Second

// ChangedSubject carries "the shards I hold changed" (a join, a claim, a
// release, a shutdown) between brokers; every Membership ticks on it at once
// instead of waiting for its next renew, so graceful moves take a round trip
// or two rather than a renew interval. The body is the sender's id.
const ChangedSubject = SubjectPrefix + ".changed"

// MembershipConfig configures a Membership. Zero values take the defaults
// named.
type MembershipConfig struct {
	Store LeaseStore
	// Server serves the held shards' subjects: subscribed when a shard is
	// gained, drained and unsubscribed when it is lost. Nil: only track.
	Server *Server
	// Conn carries ChangedSubject; nil ticks on the renew interval only.
	Conn *nats.Conn
	// ID is this broker's id; default a fresh UUIDv7.
	ID uuid.UUID
	// HTTPURL is advertised in the cluster view.
	HTTPURL string
	// Build is advertised in queen.brokers with every heartbeat, and so in
	// the cluster view: Build.Layout must be the layout generation this
	// broker reads and writes (persistence.LayoutGeneration), which a layout
	// migration of a higher generation refuses to run past while the broker
	// is live (SPEC.md §2). The zero value advertises generation 0, the
	// oldest: it can hold a layout migration back, never let one through.
	Build queen.Build
	// Count is the cluster's shard count; default DefaultCount.
	Count int
	// Lease is how long a lease (and a heartbeat) lives without renewal;
	// default DefaultLease. Leases are renewed every Lease/3, and a broker
	// that stops renewing loses its shards at most Lease after its last
	// renewal.
	Lease time.Duration
	// OnLost, when set, is told of the shards this broker no longer holds,
	// once they are unserved (drained), with the shard count (shard of a
	// partition: Of): the broker passivates their partitions' actors at
	// once instead of waiting for them to go idle. Called from the
	// membership loop; it must not block.
	OnLost func(lost []int, count int)
	Logger *slog.Logger
}

// Membership keeps this broker's share of the shards: every Lease/3 (and at
// once when another broker's shards change, or when a lease it saw is due to
// run out) it heartbeats and claims or renews its fair share in one
// statement, releases the surplus when brokers joined, serves exactly the
// shards it holds, and refreshes the ownership view the Router reads.
// PostgreSQL decides who holds what; the view is an optimisation that may be
// stale without changing a verdict (SPEC.md §9).
type Membership struct {
	cfg      MembershipConfig
	self     string
	interval time.Duration
	view     atomic.Pointer[ownerView]

	mu   sync.Mutex // guards held
	held map[int]bool

	wake    chan struct{}
	sub     *nats.Subscription
	stop    chan struct{}
	done    chan struct{}
	halt    sync.Once
	running atomic.Bool // the loop was started
	dropped atomic.Bool // Abandon: never release
}

// ownerView is the ownership as of the last tick.
type ownerView struct {
	owner []string    // per shard: the owner's id, "" when free
	until []time.Time // per shard: when its lease runs out, on this process's clock
	// due is the earliest moment another broker's lease or heartbeat runs
	// out (zero when none is ahead): the next tick may claim its shards.
	due time.Time
}

// minGap spaces ticks triggered by other brokers' changes.
const minGap = 20 * time.Millisecond

// NewMembership returns a Membership that holds nothing yet; Start joins.
// It refuses (a *lifecycle.SettingError) a missing Store and a negative Count
// or Lease.
func NewMembership(cfg MembershipConfig) (*Membership, error) {
	if err := errors.Join(
		lifecycle.Required("MembershipConfig.Store", cfg.Store == nil),
		lifecycle.NotNegative("MembershipConfig.Count", cfg.Count),
		lifecycle.NotNegative("MembershipConfig.Lease", cfg.Lease),
	); err != nil {
		return nil, fmt.Errorf("shards: %w", err)
	}
	if cfg.Count == 0 {
		cfg.Count = DefaultCount
	}
	if cfg.Lease == 0 {
		cfg.Lease = DefaultLease
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ID == uuid.Nil {
		cfg.ID = uuid.Must(uuid.NewV7())
	}
	return &Membership{
		cfg: cfg, self: cfg.ID.String(), interval: cfg.Lease / 3, held: map[int]bool{},
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
	}, nil
}

// ID is this broker's id in the cluster.
func (m *Membership) ID() string { return m.self }

// Lease is the lease duration.
func (m *Membership) Lease() time.Duration { return m.cfg.Lease }

// Start runs the first tick (a broker alone takes every shard before it
// serves a request) and then the renew loop.
func (m *Membership) Start(ctx context.Context) error {
	if m.cfg.Conn != nil {
		sub, err := m.cfg.Conn.Subscribe(ChangedSubject, func(msg *nats.Msg) {
			if string(msg.Data) == m.self {
				return
			}
			select {
			case m.wake <- struct{}{}:
			default:
			}
		})
		if err != nil {
			return fmt.Errorf("shards: subscribe to %s: %w", ChangedSubject, err)
		}
		m.sub = sub
	}
	if err := m.tick(ctx); err != nil {
		if m.sub != nil {
			m.sub.Unsubscribe() //nolint:errcheck
		}
		return fmt.Errorf("shards: joining the cluster: %w", err)
	}
	m.announce() // a joining broker holds nothing yet: the others make room now
	m.running.Store(true)
	go m.run()
	return nil
}

func (m *Membership) run() {
	defer close(m.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-m.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	last := time.Now()
	for {
		next := m.interval - time.Since(last)
		if v := m.view.Load(); v != nil && !v.due.IsZero() {
			if d := time.Until(v.due) + minGap; d < next {
				next = d
			}
		}
		timer := time.NewTimer(max(next, minGap))
		select {
		case <-m.stop:
			timer.Stop()
			return
		case <-timer.C:
		case <-m.wake:
			timer.Stop()
			if d := minGap - time.Since(last); d > 0 {
				select {
				case <-m.stop:
					return
				case <-time.After(d):
				}
			}
		}
		m.tick(ctx) //nolint:errcheck // logged; the next tick tries again
		last = time.Now()
	}
}

// tick is one renew: claim/renew/release in PostgreSQL, serve what is held,
// refresh the view.
func (m *Membership) tick(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, max(m.interval, time.Second))
	defer cancel()
	held, taken, err := m.cfg.Store.ClaimShards(ctx, m.cfg.ID, m.cfg.HTTPURL, m.cfg.Build, m.cfg.Lease)
	if err != nil {
		if !m.stopping() {
			m.cfg.Logger.Warn("shard lease renewal failed; serving the shards held until they run out", "err", err)
		}
		return err
	}
	now := make(map[int]bool, len(held))
	for _, n := range held {
		now[n] = true
	}
	m.mu.Lock()
	var gained, lost []int
	for _, n := range held {
		if !m.held[n] {
			gained = append(gained, n)
		}
	}
	for n := range m.held {
		if !now[n] {
			lost = append(lost, n)
		}
	}
	m.held = now
	m.mu.Unlock()
	if m.cfg.Server != nil {
		for _, n := range gained {
			if err := m.cfg.Server.Serve(n); err != nil {
				m.cfg.Logger.Warn("serving a claimed shard failed", "shard", n, "err", err)
			}
		}
		for _, n := range lost {
			if err := m.cfg.Server.Unserve(n); err != nil {
				m.cfg.Logger.Warn("unserving a lost shard failed", "shard", n, "err", err)
			}
		}
		if len(gained) > 0 && m.cfg.Conn != nil {
			m.cfg.Conn.FlushTimeout(m.interval) //nolint:errcheck // the subscriptions are in place before others route here
		}
	}
	if len(lost) > 0 && m.cfg.OnLost != nil {
		m.cfg.OnLost(lost, m.cfg.Count)
	}
	if len(gained)+len(lost) > 0 {
		m.cfg.Logger.Info("shards moved", "broker", m.self, "held", len(held), "claimed", len(taken), "gained", len(gained), "lost", len(lost))
		m.announce()
	}
	start := time.Now()
	st, err := m.cfg.Store.ClusterState(ctx)
	if err != nil {
		if !m.stopping() {
			m.cfg.Logger.Warn("reading the shard owners failed", "err", err)
		}
		return err
	}
	m.setView(st, now, start)
	return nil
}

func (m *Membership) stopping() bool {
	select {
	case <-m.stop:
		return true
	default:
		return false
	}
}

// setView turns the leases read at local time at into the Router's view.
// A lease's end is measured from before the read, so it is never thought
// live for longer than PostgreSQL says.
func (m *Membership) setView(st queen.ClusterView, held map[int]bool, at time.Time) {
	v := &ownerView{owner: make([]string, m.cfg.Count), until: make([]time.Time, m.cfg.Count)}
	consider := func(end time.Time) {
		if end.After(time.Now()) && (v.due.IsZero() || end.Before(v.due)) {
			v.due = end
		}
	}
	for _, l := range st.Shards {
		if l.Shard < 0 || l.Shard >= m.cfg.Count || l.Owner == "" {
			continue
		}
		v.owner[l.Shard] = l.Owner
		v.until[l.Shard] = at.Add(l.ExpiresAt.Sub(st.Now))
		if l.Owner != m.self && l.Live {
			consider(v.until[l.Shard])
		}
	}
	for _, b := range st.Brokers {
		if b.ID != m.self && b.Live {
			consider(at.Add(b.ExpiresAt.Sub(st.Now)))
		}
	}
	for n := range held {
		if n < m.cfg.Count && v.owner[n] != m.self {
			v.owner[n] = m.self
		}
	}
	m.view.Store(v)
}

func (m *Membership) announce() {
	if m.cfg.Conn != nil {
		m.cfg.Conn.Publish(ChangedSubject, []byte(m.self)) //nolint:errcheck // others tick on their interval anyway
	}
}

// RemoteOwner returns the id of the broker holding a live lease on shard n
// when it is another broker (the Router then sends its items there, in one
// hop with those of the push's other shards it holds); "" when this broker
// holds it, or nobody holds a live one, so it is served here.
func (m *Membership) RemoteOwner(n int) string {
	v := m.view.Load()
	if v == nil || n < 0 || n >= len(v.owner) {
		return ""
	}
	if o := v.owner[n]; o != "" && o != m.self && time.Now().Before(v.until[n]) {
		return o
	}
	return ""
}

// Held lists the shards this broker holds, in order.
func (m *Membership) Held() []int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]int, 0, len(m.held))
	for n := 0; n < m.cfg.Count; n++ {
		if m.held[n] {
			out = append(out, n)
		}
	}
	return out
}

// Owners returns the owner this broker routes each shard to: an id, or ""
// when no live lease is known (served here).
func (m *Membership) Owners() []string {
	out := make([]string, m.cfg.Count)
	v := m.view.Load()
	if v == nil {
		return out
	}
	now := time.Now()
	for n := range out {
		if v.owner[n] != "" && (v.owner[n] == m.self || now.Before(v.until[n])) {
			out[n] = v.owner[n]
		}
	}
	return out
}

// ClusterView reads the cluster from PostgreSQL (GET /api/v1/cluster).
func (m *Membership) ClusterView(ctx context.Context) (queen.ClusterView, error) {
	v, err := m.cfg.Store.ClusterState(ctx)
	if err != nil {
		return v, err
	}
	v.Self, v.LeaseSeconds = m.self, m.cfg.Lease.Seconds()
	return v, nil
}

// stopLoop ends the renew loop and the change subscription.
func (m *Membership) stopLoop() {
	m.halt.Do(func() {
		if m.sub != nil {
			m.sub.Unsubscribe() //nolint:errcheck
		}
		close(m.stop)
	})
	if m.running.Load() {
		<-m.done
	}
}

// Abandon stops renewing without releasing anything, as if the broker had
// died or paused: its heartbeat and leases run out after the lease and
// other brokers take its shards, while this broker still serves what it
// held and routes as it last saw. Tests simulate kills and forced dual
// ownership with it; Stop afterwards releases nothing.
func (m *Membership) Abandon() {
	m.dropped.Store(true)
	m.stopLoop()
}

// Stop ends the renew loop and releases every lease (removing the broker's
// row), so the other brokers take its shards at once; a second Stop, and a
// Stop without a successful Start, do nothing. The shards stay
// served until the Server stops: requests routed here meanwhile are still
// answered.
func (m *Membership) Stop(ctx context.Context) error {
	m.stopLoop()
	if m.dropped.Swap(true) || !m.running.Load() {
		return nil // stopped before, abandoned, or never joined
	}
	// Bounded: with the database gone the leases simply run out.
	ctx, cancel := context.WithTimeout(ctx, min(m.cfg.Lease, 5*time.Second))
	defer cancel()
	n, err := m.cfg.Store.ReleaseShards(ctx, m.cfg.ID)
	if err != nil {
		return fmt.Errorf("shards: releasing the shard leases: %w", err)
	}
	m.cfg.Logger.Info("shard leases released", "broker", m.self, "shards", n)
	m.announce()
	if m.cfg.Conn != nil {
		m.cfg.Conn.FlushTimeout(time.Second) //nolint:errcheck
	}
	return nil
}
