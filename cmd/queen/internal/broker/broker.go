// Package broker wires one broker process together: PostgreSQL (external or
// managed), NATS (external or embedded), the partition actors, the shard
// router and server, and the NATS and HTTP front doors. `queen serve`, the
// end-to-end tests and `queen loadtest --embedded` all start brokers here.
package broker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/actors"
	"github.com/queen-mq/queen-go/consume"
	"github.com/queen-mq/queen-go/metrics"
	"github.com/queen-mq/queen-go/persistence"
	"github.com/queen-mq/queen-go/persistence/localpg"
	"github.com/queen-mq/queen-go/shards"
	"github.com/queen-mq/queen-go/transport"
	"github.com/queen-mq/queen-go/transport/auth"
	"github.com/queen-mq/queen-go/transport/client"
)

// Config is a broker's settings; cmd/queen fills it from flags and the
// environment. Zero values take the defaults named.
type Config struct {
	// HTTPAddr is the HTTP listen address (QUEEN_HTTP_ADDR, default 127.0.0.1:6632;
	// port 0 picks a free port).
	HTTPAddr string
	// DataDir holds the managed PostgreSQL and postgres.url (QUEEN_DATA_DIR, default ./.queen).
	DataDir string
	// NATSListen is the embedded NATS server's address (QUEEN_NATS_LISTEN,
	// default 127.0.0.1:4222; port 0 picks a free port). Unused with NATSURL.
	NATSListen string
	// NATSURL uses an external NATS server instead of the embedded one.
	NATSURL string
	// NATSConfigFile is a nats-server configuration file for the embedded
	// server (QUEEN_NATS_CONFIG), read with nats-server's own
	// server.ProcessConfigFile: its authorization (users with subject
	// permissions, nkeys, accounts) and its tls block (TLS on the NATS
	// listener) apply; the listen address stays NATSListen and the broker
	// keeps its own payload, buffer, signal and log settings. Unused with
	// NATSURL. Empty: no authorization, any client may connect.
	NATSConfigFile string
	// NATSAuth is the broker's own NATS credentials (NATS_CREDS, NATS_NKEY,
	// NATS_USER/NATS_PASSWORD) and, for an external server, the CA its
	// certificate is checked against (NATS_CA_FILE): its connections to
	// NATSURL, or in process to the embedded server when NATSConfigFile
	// gives it users. Empty: none.
	NATSAuth client.NATSAuth
	// TLSCertFile and TLSKeyFile, both set, make the gateway serve HTTPS
	// with this PEM certificate (chain) and key (QUEEN_TLS_CERT,
	// QUEEN_TLS_KEY); ReloadTLS reads them again (SIGHUP). Empty: HTTP.
	TLSCertFile, TLSKeyFile string
	// TLSClientCAFile, with HTTPS, requires a client certificate signed by
	// this PEM CA of every connection to the gateway (mutual TLS,
	// QUEEN_TLS_CLIENT_CA); ReloadTLS reads it again. Without
	// TLSCertFile it stops the start. Empty: no client certificate asked.
	TLSClientCAFile string
	// DatabaseURL uses an external PostgreSQL instead of the managed one.
	DatabaseURL string
	// PGBin is where the managed PostgreSQL's binaries are (QUEEN_PG_BIN).
	PGBin string
	// MaxPayloadBytes is QUEEN_MAX_PAYLOAD_BYTES, default queen.DefaultMaxPayloadBytes (4 MiB).
	MaxPayloadBytes int
	// ShardCount is the number of shards (SPEC.md §9, QUEEN_SHARD_COUNT). It
	// is fixed when the first broker starts on a database (default 64) and
	// stored there; 0 adopts the stored count, and a broker configured with
	// a different count refuses to start.
	ShardCount int
	// ShardLease is how long a shard lease and a broker heartbeat live
	// without renewal (QUEEN_SHARD_LEASE, default 10s); leases are renewed
	// every ShardLease/3, and a broker that stops renewing loses its shards
	// at most ShardLease after its last renewal.
	ShardLease time.Duration
	// HopTimeout bounds a request's hop to the broker owning its shard
	// (default ShardLease/2, at least 2 s: about when a killed owner's shards
	// move); a hop that times out answers its items failed (outcome unknown,
	// SPEC.md §3).
	HopTimeout time.Duration
	// MaxPendingItems bounds one partition's waiting items (default 20000).
	MaxPendingItems int
	// PollRecheck is how often a parked long poll looks at PostgreSQL again
	// without a wake-up (default 1s; lease expiries and delayed messages
	// wake nobody). Tests set it long to tell a wake-up from a re-check.
	PollRecheck time.Duration
	// Retention configures the retention loop (QUEEN_RETENTION_INTERVAL,
	// QUEEN_RETENTION_BATCH, test-only QUEEN_TEST_TXNS_FLOOR); zero values
	// take persistence's defaults. Its Logger defaults to Logger.
	Retention persistence.RetentionConfig
	// SidecarRange is the time span of one range of the per-hash sidecar
	// index (QUEEN_SIDECAR_RANGE, default persistence.DefaultSidecarRange,
	// 1m; persistence.Config.SidecarRange).
	SidecarRange time.Duration
	// LockTimeout bounds each wait for a row lock (QUEEN_LOCK_TIMEOUT,
	// default 5s; persistence.Config.LockTimeout): a push whose partition's
	// lock is held longer answers that partition's items failed with code
	// lock_timeout and commits its other partitions without it.
	LockTimeout time.Duration
	// LockAtBumpFrom is persistence.Config.LockAtBumpFrom: the fewest
	// partitions their actors know a push bundle must hold for their row
	// locks to be taken at the allocators' bump (0: 128).
	LockAtBumpFrom int
	// DedupCacheOff starts with the broker-side dedup cache off
	// (QUEEN_DEDUP_CACHE=off, SPEC.md §8); it can be switched live through
	// /api/v1/admin/dedup-cache.
	DedupCacheOff bool
	// DedupCacheMB is the cache's memory budget for all partitions
	// (QUEEN_DEDUP_CACHE_MB, default 512).
	DedupCacheMB int
	// DedupCacheBytes, when > 0, is the budget in bytes and wins over
	// DedupCacheMB (tests use tiny budgets that evict constantly).
	DedupCacheBytes int64
	// DedupCacheColdFor, when > 0, is how long a partition whose cache was
	// evicted stays without one (actors.CacheConfig.ColdFor); 0, the
	// production value, means one window. Tests shorten it.
	DedupCacheColdFor time.Duration
	// AdminToken (QUEEN_ADMIN_TOKEN), when not empty, is the bearer token
	// the admin routes and the operator API require (SPEC.md §13,
	// transport.Config.AdminToken); the message plane never asks for it.
	AdminToken string
	// JWT, when set, turns on JWT authentication and roles on the HTTP and
	// NATS front doors (JWT_ENABLED=true and the other JWT_* variables,
	// SPEC.md §14; transport.Config.JWT): AdminToken is then not
	// consulted. Its Logger defaults to Logger. Settings it refuses
	// (auth.New) stop the start before anything else runs. Nil: JWT off.
	JWT *auth.Config
	// PartitionIdle is how long a partition actor may go without a push
	// before it is passivated (stopped, its memory freed; the next push
	// spawns it again): QUEEN_PARTITION_IDLE / --partition-idle, whose
	// default is DefaultPartitionIdle. 0 (the zero value) disables
	// passivation. See actors.Config.PartitionIdle.
	PartitionIdle time.Duration
	// PartitionMemoryMB bounds the heap the active partitions hold, MiB
	// (QUEEN_PARTITION_MEMORY_MB / --partition-memory-mb, whose default is
	// DefaultPartitionMemoryMB): at most PartitionMemoryMB MiB ÷
	// actors.ActivePartitionBytes partition actors are alive at once (and
	// no more than half the dedup cache's budget holds,
	// ActivePartitionsBound), the least recently pushed passivated first
	// past it. 0 (the zero value): no bound. See
	// actors.Config.MaxActivePartitions.
	PartitionMemoryMB int
	// MaxActivePartitions, when > 0, is the bound on active partitions
	// itself, instead of PartitionMemoryMB's (tests use tiny bounds).
	MaxActivePartitions int
	// MaxInFlightBodyBytes bounds the push and transaction bodies read or
	// being read at once, bytes (transport.Config.MaxInFlightBodyBytes,
	// default transport.DefaultMaxInFlightBodyBytes, 128 MiB), counted as
	// they arrive: past it (or past a client address's quarter of it) a
	// push is answered 503 overloaded. Tests use tiny budgets.
	MaxInFlightBodyBytes int64
	// BodyIdleTimeout cuts off an HTTP body from which nothing arrives for
	// this long (transport.Config.BodyIdleTimeout; default
	// transport.DefaultBodyIdleTimeout, 5s).
	BodyIdleTimeout time.Duration
	// Version is the release, reported by the NATS micro service and
	// advertised (with Revision, the schema version and the layout
	// generation) in the start log line, /health, queen.brokers and the
	// cluster view; default Release.
	Version string
	// Revision is the VCS revision advertised beside Version; default
	// Revision().
	Revision string
	Logger   *slog.Logger
	// storageEvery is the storage gauges' sampling interval (tests;
	// default storageEvery, 10 s).
	storageEvery time.Duration
}

// DefaultPartitionIdle is the default of QUEEN_PARTITION_IDLE: a partition
// actor with no push for 2 minutes is passivated.
const DefaultPartitionIdle = 2 * time.Minute

// DefaultPartitionMemoryMB is the default of QUEEN_PARTITION_MEMORY_MB:
// 256 MiB, about 191,700 active partitions. At 64 MiB (47,934, before
// 0.6.4) traffic spread over 100,000 partitions missed the bound's LRU on
// half its pushes, each miss a spawn and a cold cache probing the whole
// window (README, Partitions and memory).
const DefaultPartitionMemoryMB = 256

// MaxActivePartitions is the partition actors a budget of mb MiB allows
// (mb << 20 ÷ actors.ActivePartitionBytes; 0: no bound).
func MaxActivePartitions(mb int) int {
	return int(int64(mb) << 20 / actors.ActivePartitionBytes)
}

// ActivePartitionsBound is the bound on active partition actors of a broker
// whose partition budget is mb MiB and whose dedup cache's budget is
// cacheBytes (0: the cache is off): MaxActivePartitions(mb), but no more
// than half the cache's budget holds at a partition cache's least
// (actors.MinPartitionCacheBytes), so that the actors alone never fill the
// cache and it degrades (evicts the least recently used) rather than
// evicting on every spawn. With the defaults (256 and 512 MiB) the partition
// budget decides: 191,739; with QUEEN_DEDUP_CACHE_MB=64, the cache:
// 69,905. mb 0: no bound.
func ActivePartitionsBound(mb int, cacheBytes int64) int {
	n := MaxActivePartitions(mb)
	if n > 0 && cacheBytes > 0 {
		n = max(1, min(n, int(cacheBytes/2/actors.MinPartitionCacheBytes)))
	}
	return n
}

func (c *Config) defaults() {
	if c.HTTPAddr == "" {
		c.HTTPAddr = "127.0.0.1:6632"
	}
	if c.DataDir == "" {
		c.DataDir = ".queen"
	}
	if c.NATSListen == "" {
		c.NATSListen = "127.0.0.1:4222"
	}
	if c.ShardLease <= 0 {
		c.ShardLease = shards.DefaultLease
	}
	if c.Version == "" {
		c.Version = Release
	}
	if c.Revision == "" {
		c.Revision = Revision()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Broker is a running broker.
type Broker struct {
	cfg     Config
	log     *slog.Logger
	pg      *localpg.Cluster
	dbURL   string
	store   *persistence.Store
	retain  *persistence.Retention
	natsURL string
	// natsInProcess is the embedded NATS server, which the broker's own
	// connections reach in process (no loopback socket); nil with NATSURL.
	natsInProcess nats.InProcessConnProvider
	// natsEmbedded is the embedded NATS server (ReloadNATSConfig); nil
	// with NATSURL.
	natsEmbedded *embeddedNATS
	nc           *nats.Conn
	ncShards     *nats.Conn
	host         *actors.Host
	cache        *actors.Cache
	shardSrv     *shards.Server
	members      *shards.Membership
	router       *shards.Router
	svc          *transport.Service
	// jwt verifies bearer tokens with JWT on (Config.JWT); nil: off.
	jwt      *auth.Verifier
	cons     *consume.Coordinator
	notifier *transport.Notifier
	natsSvc  *transport.NATSService
	httpSrv  *http.Server
	httpLn   net.Listener
	// cert is the HTTPS certificate (Config.TLSCertFile); nil: plain HTTP.
	cert *certificate
	// gate is httpSrv's handler: /health answers "starting" with the
	// phase (setPhase) until the front doors open it.
	gate    *transport.Gate
	metrics *metrics.Set
	stopped chan struct{}
	// fatal carries the first fatal error (Fatal); closing is set once
	// Stop closes the NATS connections.
	fatal   chan error
	closing atomic.Bool
	// running is what start started, in order (lifecycle.go).
	running []running
}

// Start starts a broker and returns once it serves HTTP and NATS. On error
// everything started so far is stopped again.
func Start(ctx context.Context, cfg Config) (*Broker, error) {
	cfg.defaults()
	b := &Broker{cfg: cfg, log: cfg.Logger, metrics: metrics.New(), stopped: make(chan struct{}), fatal: make(chan error, 1)}
	if err := b.start(ctx); err != nil {
		// Stop whatever started, the managed PostgreSQL included.
		if terr := b.teardown(context.Background()); terr != nil {
			return nil, errors.Join(err, fmt.Errorf("broker: cleaning up after the failed start: %w", terr))
		}
		return nil, err
	}
	return b, nil
}

// start starts the broker's pieces in one order, each a lifecycle.Service (or
// a closer, for what is opened rather than started); teardown stops them in
// the reverse order. So the order below is also the shutdown's, read
// backwards: the shard leases go first (the other brokers take the shards
// while this one still answers what is routed to it), then retention, then
// the front doors drain, then the notifier, its announcer (which publishes
// the notices still gathered), the shard server, the partition actors
// (their commits finish), the NATS connections, the pool, the managed
// PostgreSQL and the embedded NATS server.
func (b *Broker) start(ctx context.Context) error {
	for _, phase := range []func(context.Context) error{b.startEngines, b.startActors, b.startShards, b.startFrontDoors} {
		if err := phase(ctx); err != nil {
			return err
		}
	}
	return nil
}

// setPhase names the start's current phase, which /health reports until
// the broker is ready (transport.Gate).
func (b *Broker) setPhase(phase string) {
	if b.gate != nil {
		b.gate.SetPhase(phase)
	}
}

// startEngines takes the HTTP port and serves it at once through the gate
// (/health: 503 "starting" with the phase), starts (or reaches) NATS and
// PostgreSQL, migrates the database and opens the store and retention.
func (b *Broker) startEngines(ctx context.Context) (err error) {
	cfg := b.cfg
	if cfg.JWT != nil {
		// First: a JWT setting the verifier refuses stops the start
		// before a port is taken or a database started.
		jc := *cfg.JWT
		if jc.Logger == nil {
			jc.Logger = b.log
		}
		if b.jwt, err = auth.New(jc); err != nil {
			return fmt.Errorf("broker: JWT settings: %w", err)
		}
		b.onStop("the JWT verifier", func(context.Context) error { b.jwt.Close(); return nil })
		if cfg.AdminToken != "" {
			b.log.Warn("QUEEN_ADMIN_TOKEN is set with JWT on: it is not consulted; the admin routes need a JWT with the admin role")
		}
		b.log.Info("JWT authentication on", "algorithms", b.jwt.Algorithms(), "issuer", jc.Issuer, "audience", jc.Audience,
			"jwks", jc.JWKSURL, "skip_paths", jc.SkipPaths)
	}
	// NATS credentials and a CA file that cannot work stop the start
	// here too, before a port is taken.
	if _, err = cfg.NATSAuth.Options(false); err != nil {
		return fmt.Errorf("broker: %w", err)
	}
	if cfg.TLSCertFile != "" || cfg.TLSKeyFile != "" || cfg.TLSClientCAFile != "" {
		if b.cert, err = newCertificate(cfg.TLSCertFile, cfg.TLSKeyFile, cfg.TLSClientCAFile); err != nil {
			return err
		}
	}
	// Ports first: a clash fails at once, before any database work.
	if b.httpLn, err = net.Listen("tcp", cfg.HTTPAddr); err != nil {
		return fmt.Errorf("broker: HTTP listen on %s: %w", cfg.HTTPAddr, err)
	}
	ln := b.httpLn
	// The HTTP server runs from here on: until the front doors open the
	// gate it answers /health 503 {"status":"starting","phase":...} and
	// everything else 503 starting, so a broker waiting minutes on the
	// migration lock is seen alive and not ready. The front doors' Stop
	// drains it; this stop closes it after a failed start (and the
	// listener, in case Serve has not taken it yet).
	b.gate = transport.NewGate(b.Build())
	b.httpSrv = &http.Server{
		Handler:           b.gate,
		ReadHeaderTimeout: 10 * time.Second,
		// A client that stops sending its body mid-way is cut off rather
		// than holding a connection (and a drain) forever.
		ReadTimeout: 60 * time.Second,
		IdleTimeout: 2 * time.Minute,
	}
	srv := b.httpSrv
	serve := srv.Serve
	if b.cert != nil {
		srv.TLSConfig = b.cert.config()
		// Failed handshakes (a client that does not trust the
		// certificate, a port scanner) are the client's affair: debug.
		srv.ErrorLog = slog.NewLogLogger(b.log.Handler(), slog.LevelDebug)
		serve = func(ln net.Listener) error { return srv.ServeTLS(ln, "", "") }
	}
	go func() {
		if err := serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			b.log.Error("HTTP server stopped", "err", err)
		}
	}()
	b.onStop("the HTTP server", func(context.Context) error { srv.Close(); ln.Close(); return nil }) // drained already once the front doors stopped
	b.natsURL = cfg.NATSURL
	if b.natsURL == "" {
		b.setPhase("nats")
		ns, err := newEmbeddedNATS(cfg.NATSListen, cfg.NATSConfigFile)
		if err != nil {
			return err
		}
		if err = b.run(ctx, "the embedded NATS server", ns); err != nil {
			return err
		}
		b.natsURL = ns.URL()
		b.natsInProcess = ns.srv
		b.natsEmbedded = ns
	}

	b.dbURL = cfg.DatabaseURL
	if b.dbURL == "" {
		b.setPhase("postgres")
		b.log.Info("starting managed PostgreSQL", "data_dir", cfg.DataDir)
		pg, err := newManagedPG(localpg.Config{Holder: "serve", DataDir: cfg.DataDir, BinDir: cfg.PGBin, Logger: b.log})
		if err != nil {
			return err
		}
		if err = b.run(ctx, "the managed PostgreSQL", pg); err != nil {
			return err
		}
		b.pg = pg.cluster
		b.dbURL = b.pg.URL()
	}
	// A schema this binary does not know, or a layout migration while
	// older brokers are live, is refused here (SPEC.md §2): the broker
	// exits with the error.
	b.setPhase("migrating")
	applied, err := persistence.MigrateWith(ctx, persistence.MigrateConfig{URL: b.dbURL, Logger: b.log})
	if err != nil {
		return err
	}
	if len(applied) > 0 {
		b.log.Info("applied migrations", "versions", applied)
	}
	b.setPhase("opening")
	if b.store, err = persistence.Open(ctx, persistence.Config{
		URL: b.dbURL, SidecarRange: cfg.SidecarRange, LockTimeout: cfg.LockTimeout, LockAtBumpFrom: cfg.LockAtBumpFrom,
		ObserveLock: func(e persistence.LockEvent) {
			if e.Moved {
				b.metrics.PushMoved.Inc()
				return
			}
			b.metrics.ObserveLock(e.Op, e.Wait.Seconds(), e.TimedOut)
		},
	}); err != nil {
		return err
	}
	b.onStop("the pool", func(context.Context) error { b.store.Close(); return nil })
	rc := cfg.Retention
	if rc.Logger == nil {
		rc.Logger = b.log
	}
	if b.retain, err = b.store.NewRetention(rc); err != nil {
		return err
	}
	return nil
}

// startActors joins the cluster (its shard count), connects to NATS and
// starts the dedup cache and the partition actors.
func (b *Broker) startActors(ctx context.Context) (err error) {
	cfg := b.cfg
	b.setPhase("actors")
	if cfg.ShardCount, err = b.joinCluster(ctx); err != nil {
		return err
	}
	b.cfg.ShardCount = cfg.ShardCount

	// Two connections: client requests on one, the internal shard hops (and
	// their replies) on the other, so a burst of large client bodies cannot
	// starve or disconnect the hops.
	if b.nc, err = b.connectNATS("queen-broker"); err != nil {
		return err
	}
	b.onStop("the NATS connections", b.closeConns)
	if b.ncShards, err = b.connectNATS("queen-broker-shards"); err != nil {
		return err
	}

	budget := int64(cfg.DedupCacheMB) << 20
	if cfg.DedupCacheBytes > 0 {
		budget = cfg.DedupCacheBytes
	}
	capBy := budget // the bound's cap (ActivePartitionsBound); none with the cache off
	if cfg.DedupCacheOff {
		capBy = 0
	}
	b.cache = actors.NewCache(actors.CacheConfig{BudgetBytes: budget, Disabled: cfg.DedupCacheOff, ColdFor: cfg.DedupCacheColdFor, Source: b.store, Logger: b.log})
	registerCacheMetrics(b.metrics, b.cache)
	if b.host, err = actors.NewHost(actors.Config{Store: b.store, Metrics: b.metrics, Logger: b.log, MaxPendingItems: cfg.MaxPendingItems, NewCache: b.cache.New, PartitionIdle: cfg.PartitionIdle,
		MaxActivePartitions: cmp.Or(cfg.MaxActivePartitions, ActivePartitionsBound(cfg.PartitionMemoryMB, capBy))}); err != nil {
		return err
	}
	if err = b.run(ctx, "the partition actors", b.host); err != nil {
		return err
	}
	registerPartitionMetrics(b.metrics, b.host)
	return nil
}

// startShards serves this broker's shards, joins the shard membership and
// builds the router that sends items to their shard's owner.
func (b *Broker) startShards(ctx context.Context) (err error) {
	cfg := b.cfg
	b.setPhase("shards")
	// Shard-aware clients' pushes on the shard subjects (SPEC.md §9) go to
	// the NATS front door, built on this server's router and membership:
	// startFrontDoors gives it to the server (SetDirect) before the
	// membership serves any shard.
	// With JWT on, a shard hop carries the client request's token and is
	// verified again here, at the read-write level: the shard subjects take
	// no push the front door would refuse (ServerConfig.Authenticate).
	var hopAuth func(context.Context, string) (string, bool, *queen.Error)
	if v := b.jwt; v != nil {
		hopAuth = func(ctx context.Context, authorization string) (string, bool, *queen.Error) {
			id, e := v.Check(ctx, authorization, auth.ReadWrite, "a shard hop (queen.v1.shard.<n>.push in the brokers' encoding)")
			if e != nil {
				return "", false, e
			}
			return id.Subject, id.Level == auth.Admin, nil
		}
	}
	if b.shardSrv, err = shards.NewServer(shards.ServerConfig{Conn: b.ncShards, Pusher: shards.ActorPusher(b.host), Count: cfg.ShardCount,
		MaxPayloadBytes: cfg.MaxPayloadBytes, Authenticate: hopAuth, Logger: b.log}); err != nil {
		return err
	}
	if err = b.run(ctx, "the shard server", b.shardSrv); err != nil {
		return err
	}
	// The shards this broker serves are those it holds leases on (SPEC.md
	// §9); a broker alone holds them all once Start returns.
	if b.members, err = shards.NewMembership(shards.MembershipConfig{
		Store: b.store, Server: b.shardSrv, Conn: b.ncShards, HTTPURL: b.HTTPURL(), Build: b.Build(),
		Count: cfg.ShardCount, Lease: cfg.ShardLease, Logger: b.log,
		// The partitions of shards that moved away are released at once.
		OnLost: func(lost []int, count int) {
			gone := make(map[int]bool, len(lost))
			for _, n := range lost {
				gone[n] = true
			}
			b.host.PassivateWhere(func(queue, partition string) bool { return gone[queen.ShardOf(queue, partition, count)] })
		},
	}); err != nil {
		return err
	}
	// A hop to an owner killed mid-request is never answered: bound it by
	// half a lease (at least 2 s), about when its shards move.
	hop := cfg.HopTimeout
	if hop <= 0 {
		hop = max(cfg.ShardLease/2, 2*time.Second)
	}
	if b.router, err = shards.NewRouter(shards.RouterConfig{Conn: b.ncShards, Count: cfg.ShardCount, Owners: b.members, Local: shards.ActorPusher(b.host), HopTimeout: hop}); err != nil {
		return err
	}
	registerClusterMetrics(b.metrics, b.members, b.router, b.shardSrv)
	return nil
}

// startFrontDoors starts the consume coordinator and its notifier, the
// NATS and HTTP front doors, retention and the shard membership's leases.
func (b *Broker) startFrontDoors(ctx context.Context) (err error) {
	cfg := b.cfg
	b.setPhase("front-doors")
	// Wake-ups, in the order they depend on each other: the announcer
	// publishes this broker's notices to the other brokers; the
	// coordinator announces through it the partitions retry acks made
	// deliverable again (having woken its own polls); the notifier wakes
	// the coordinator's polls for pushes here and for the other brokers'
	// notices, and announces the pushes through the announcer.
	ann, err := transport.NewAnnouncer(transport.AnnouncerConfig{Conn: b.ncShards, Logger: b.log})
	if err != nil {
		return err
	}
	if err = b.run(ctx, "the notice announcer", ann); err != nil {
		return err
	}
	b.cons = consume.New(b.store, consume.Options{Recheck: cfg.PollRecheck, OnAvailable: ann.Announce})
	if b.notifier, err = transport.NewNotifier(transport.NotifierConfig{Announcer: ann, Local: b.cons}); err != nil {
		return err
	}
	if err = b.run(ctx, "the notifier", b.notifier); err != nil {
		return err
	}
	b.metrics.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "queen_pop_parked_polls", Help: "Long polls waiting for messages.",
	}, func() float64 { return float64(b.cons.Parked()) }))
	registerLeaseMetrics(b.metrics, b.store)
	every := cfg.storageEvery
	if every <= 0 {
		every = storageEvery
	}
	if err = b.run(ctx, "the storage gauges", newStorageSampler(b.store, b.metrics, every)); err != nil {
		return err
	}
	b.svc = transport.NewService(transport.Config{
		Pusher: b.router, Queues: b.store, MaxPayloadBytes: cfg.MaxPayloadBytes, Metrics: b.metrics, Logger: b.log,
		Consumer: consumer{Store: b.store, pops: b.cons}, OnPushed: b.notifier.Pushed, OnQueueDeleted: b.cons.Forget,
		DedupCache: cacheSwitch{b.cache}, Cluster: b.members, Operator: b.store,
		AdminToken: cfg.AdminToken, JWT: b.jwt, MaxInFlightBodyBytes: cfg.MaxInFlightBodyBytes, BodyIdleTimeout: cfg.BodyIdleTimeout,
		Partitions: func() any { return b.host.PartitionStats() }, Build: b.Build(),
		NATS: b.natsState, StorageFull: b.store.StorageFull,
	})
	if b.natsSvc, err = b.svc.NewNATS(transport.NATSConfig{Conn: b.nc, Version: cfg.Version}); err != nil {
		return err
	}
	b.shardSrv.SetDirect(b.natsSvc.ShardPush)
	if err = b.run(ctx, "the NATS and HTTP front doors", &frontDoors{svc: b.svc, nats: b.natsSvc, http: b.httpSrv, gate: b.gate, log: b.log}); err != nil {
		return err
	}
	// One broker at a time deletes (SPEC.md §7).
	if err = b.run(ctx, "retention", b.retain); err != nil {
		return err
	}
	if err = b.runWarn(ctx, "the shard membership", "shard leases not released; they run out after the lease", b.members); err != nil {
		return err
	}
	build := b.Build()
	b.log.Info("broker ready", "http", b.HTTPURL(), "nats", b.natsURL, "shards", cfg.ShardCount,
		"release", build.Release, "revision", build.Revision, "schema", build.Schema, "layout", build.Layout)
	return nil
}

// joinCluster creates the cluster's shard count on a new database, or reads
// the stored one: a broker configured with another count refuses to start.
func (b *Broker) joinCluster(ctx context.Context) (int, error) {
	want := b.cfg.ShardCount
	if want <= 0 {
		want = shards.DefaultCount
	}
	n, err := b.store.InitCluster(ctx, want)
	if err != nil {
		return 0, fmt.Errorf("broker: reading the cluster's shard count: %w", err)
	}
	if b.cfg.ShardCount > 0 && n != b.cfg.ShardCount {
		return 0, fmt.Errorf("broker: this database's cluster has %d shards (fixed when its first broker started), but this broker is configured for %d: unset QUEEN_SHARD_COUNT or set it to %d", n, b.cfg.ShardCount, n)
	}
	return n, nil
}

// connectNATS connects to the broker's NATS server, or to any server of
// its NATS cluster (NATS_URL may list several, SPEC.md §9), with the
// project's connection settings (client.NATSOptions: pings that notice
// a dead server within 15 s, reconnection forever with the subscriptions
// kept, lame-duck mode left at once), logging every disconnect. A
// connection that closes for good while the broker runs (not by Stop) is
// fatal: the broker would serve nothing, so Fatal reports it.
func (b *Broker) connectNATS(name string) (*nats.Conn, error) {
	opts := []nats.Option{
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				b.log.Warn("NATS disconnected", "connection", name, "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			b.log.Info("NATS reconnected", "connection", name, "server", nc.ConnectedUrlRedacted())
		}),
		nats.LameDuckModeHandler(func(nc *nats.Conn) {
			b.log.Info("NATS server entering lame-duck mode: moving to another server", "connection", name, "server", nc.ConnectedUrlRedacted())
			nc.ForceReconnect() //nolint:errcheck
		}),
		nats.ClosedHandler(func(nc *nats.Conn) {
			if b.closing.Load() {
				return
			}
			err := fmt.Errorf("broker: NATS connection %s closed for good (last error: %v); the broker cannot serve without it", name, nc.LastError())
			b.log.Error("NATS connection closed for good: the broker stops", "connection", name, "err", nc.LastError())
			select {
			case b.fatal <- err:
			default:
			}
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subject := ""
			if sub != nil {
				subject = sub.Subject
			}
			b.log.Warn("NATS error", "connection", name, "subject", subject, "err", err)
		})}
	url := b.natsURL
	if b.natsInProcess != nil {
		opts = append(opts, nats.InProcessServer(b.natsInProcess))
		// In process there is no socket to secure: the tls:// URL of an
		// embedded server with a tls block would make nats.go wrap the
		// pipe in TLS.
		if rest, ok := strings.CutPrefix(url, "tls://"); ok {
			url = "nats://" + rest
		}
	}
	auth, err := b.cfg.NATSAuth.Options(b.natsInProcess != nil)
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	opts = append(opts, auth...)
	nc, err := client.ConnectNATS(url, name, opts...)
	if err != nil {
		return nil, fmt.Errorf("broker: connect to NATS at %s: %w", b.natsURL, err)
	}
	return nc, nil
}

// natsState is /health's "nats": "ok" while both NATS connections are
// connected, else the state of the first that is not, in lower case
// ("reconnecting" while no server of NATS_URL answers; transport.Config.NATS).
func (b *Broker) natsState() string {
	for _, nc := range []*nats.Conn{b.nc, b.ncShards} {
		if nc != nil && !nc.IsConnected() {
			return strings.ToLower(nc.Status().String())
		}
	}
	return "ok"
}

// Fatal delivers the error that ended the broker's service while it ran: a
// NATS connection closed for good (its server gone and reconnection given
// up, or refused for good). The broker then serves nothing; the caller
// (`queen serve`) stops it and exits with the error. Nothing is delivered
// after Stop began.
func (b *Broker) Fatal() <-chan error { return b.fatal }

// cacheSwitch is the dedup cache's admin face for the transports.
type cacheSwitch struct{ c *actors.Cache }

func (s cacheSwitch) SetEnabled(on bool) { s.c.SetEnabled(on) }
func (s cacheSwitch) Stats() any         { return s.c.Stats() }

// registerCacheMetrics exposes the dedup cache's size and counters.
func registerCacheMetrics(m *metrics.Set, c *actors.Cache) {
	gauge := func(name, help string, f func(actors.CacheStats) int64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return float64(f(c.Stats())) })
	}
	counter := func(name, help string, f func(actors.CacheStats) int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(f(c.Stats())) })
	}
	m.Registry.MustRegister(
		gauge("queen_dedup_cache_enabled", "1 while the dedup cache is on (the kill switch).", func(s actors.CacheStats) int64 {
			if s.Enabled {
				return 1
			}
			return 0
		}),
		gauge("queen_dedup_cache_bytes", "Memory held by every partition's dedup cache (filters and bookkeeping).", func(s actors.CacheStats) int64 { return s.Bytes }),
		gauge("queen_dedup_cache_entries", "Hashes held by the dedup cache's filters.", func(s actors.CacheStats) int64 { return s.Entries }),
		gauge("queen_dedup_cache_partitions", "Partitions whose dedup cache holds memory.", func(s actors.CacheStats) int64 { return int64(s.Partitions) }),
		counter("queen_dedup_cache_hits_total", "Incoming hashes the cache may have seen (suspects looked up in the whole window: repeats and filter false positives).", func(s actors.CacheStats) int64 { return s.Hits }),
		counter("queen_dedup_cache_evictions_total", "Partition caches dropped to keep the memory budget.", func(s actors.CacheStats) int64 { return s.Evictions }),
		counter("queen_dedup_full_window_probes_total", "Partition probes of the whole window (watermark -1).", func(s actors.CacheStats) int64 { return s.FullProbes }),
		counter("queen_dedup_narrowed_probes_total", "Partition probes narrowed by the cache's watermark.", func(s actors.CacheStats) int64 { return s.NarrowedProbes }),
		counter("queen_dedup_cache_hydrations_total", "Partition caches filled with a whole window read from the sidecar.", func(s actors.CacheStats) int64 { return s.Hydrations }),
		counter("queen_dedup_cache_gap_reads_total", "Sidecar reads of segments other writers stored between two of this broker's commits.", func(s actors.CacheStats) int64 { return s.GapReads }),
		counter("queen_dedup_cache_print_reads_total", "Hydrations that read back, as fingerprints, the hashes of segments retention removed inside the window.", func(s actors.CacheStats) int64 { return s.PrintReads }),
	)
}

// registerLeaseMetrics exposes what this broker's store settled of expired
// leases and poison isolation (queen.LeaseStats, SPEC.md §4).
func registerLeaseMetrics(m *metrics.Set, st *persistence.Store) {
	counter := func(name, help string, f func(queen.LeaseStats) float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return f(st.LeaseStats()) })
	}
	m.Registry.MustRegister(
		counter("queen_lease_expiries_total", "Expired leases settled that still held unacked messages.",
			func(s queen.LeaseStats) float64 { return float64(s.Expiries) }),
		counter("queen_lease_bisections_total", "Expired leases over several unacked messages: none charged, the next deliveries bisected.",
			func(s queen.LeaseStats) float64 { return float64(s.Bisections) }),
		counter("queen_lease_expiry_dead_letters_total", "Messages dead-lettered by their (retryLimit+1)-th single-message lease expiry (error text \"lease expired\").",
			func(s queen.LeaseStats) float64 { return float64(s.DeadLettered) }),
		counter("queen_poison_stalls_total", "Bisections ended: a (partition, group) passed the range of its expired leases.",
			func(s queen.LeaseStats) float64 { return float64(s.Stalls) }),
		counter("queen_poison_stall_seconds_total", "Seconds (partition, group) pairs spent bisecting an expired range, from its first expiry to the pop that found it passed.",
			func(s queen.LeaseStats) float64 { return s.StallSeconds }),
	)
}

// registerPartitionMetrics exposes the partition actors' counts and the
// memory they hold (no per-partition label sets).
func registerPartitionMetrics(m *metrics.Set, h *actors.Host) {
	m.Registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "queen_partitions_active", Help: "Partition actors alive on this broker (spawned by a push, not yet passivated).",
		}, func() float64 { return float64(h.PartitionStats().Active) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "queen_partitions_passivated_total", Help: "Partition actors stopped, for being idle for QUEEN_PARTITION_IDLE or for the QUEEN_PARTITION_MEMORY_MB bound.",
		}, func() float64 { return float64(h.PartitionStats().Passivated) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "queen_partitions_pressure_passivated_total", Help: "Partition actors stopped for the QUEEN_PARTITION_MEMORY_MB bound (least recently pushed first).",
		}, func() float64 { return float64(h.PartitionStats().PressurePassivated) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "queen_partitions_bytes", Help: "Estimated heap the active partitions hold, bytes (active × the measured cost of one, actors.ActivePartitionBytes).",
		}, func() float64 { return float64(h.PartitionStats().Bytes) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "queen_partitions_active_max", Help: "The bound on active partitions from QUEEN_PARTITION_MEMORY_MB (0: none).",
		}, func() float64 { return float64(h.PartitionStats().MaxActive) }),
	)
}

// Build is what the broker advertises of its binary (SPEC.md §2): its
// release and revision (Config.Version, Config.Revision), this binary's
// schema version and layout generation.
func (b *Broker) Build() queen.Build {
	return queen.Build{Release: b.cfg.Version, Revision: b.cfg.Revision, Schema: persistence.SchemaVersion(), Layout: persistence.LayoutGeneration()}
}

// HTTPURL is the base URL of the HTTP gateway, e.g. http://127.0.0.1:6632
// (https:// with Config.TLSCertFile).
func (b *Broker) HTTPURL() string {
	if b.cert != nil {
		return "https://" + b.httpLn.Addr().String()
	}
	return "http://" + b.httpLn.Addr().String()
}

// NATSURL is the URL of the NATS server the broker uses.
func (b *Broker) NATSURL() string { return b.natsURL }

// DatabaseURL is the URL of the PostgreSQL the broker uses.
func (b *Broker) DatabaseURL() string { return b.dbURL }

// RestartPostgres restarts the broker's managed PostgreSQL in place (a fast
// stop and a start on the same folder and port, localpg.Cluster.Restart)
// while the broker keeps running: requests in flight are answered failed
// (unavailable) and retried by their clients, and the broker's pool
// reconnects once the server is back. It returns once the server accepts
// connections again. With an external database (DatabaseURL) there is
// nothing of ours to restart: an error. `queen loadtest --embedded --chaos
// pg-restart` uses it.
func (b *Broker) RestartPostgres(ctx context.Context) error {
	if b.pg == nil {
		return errors.New("broker: the database is external (DATABASE_URL): no managed PostgreSQL to restart")
	}
	return b.pg.Restart(ctx)
}

// Commits returns how many push transactions this broker ran.
func (b *Broker) Commits() uint64 { return b.host.Commits() }

// Metrics returns the broker's metrics.
func (b *Broker) Metrics() *metrics.Set { return b.metrics }

// Stop drains the broker: it releases its shard leases, stops taking
// requests, answers those in flight (their commits finish), then stops
// NATS, the pool and the managed PostgreSQL: what Start started, in the
// reverse order (start), with the errors joined. Nothing answered queued is
// lost.
func (b *Broker) Stop(ctx context.Context) error {
	select {
	case <-b.stopped:
		return nil
	default:
	}
	b.log.Info("broker draining")
	err := b.teardown(ctx)
	b.log.Info("broker stopped")
	return err
}

// teardown stops what start started, in the reverse order.
func (b *Broker) teardown(ctx context.Context) error {
	defer close(b.stopped)
	return b.stopAll(ctx)
}

// closeConns closes the broker's NATS connections; replies published by
// the drained handlers reach the server before the connection (and an
// embedded server) goes away.
func (b *Broker) closeConns(context.Context) error {
	b.closing.Store(true)
	for _, nc := range []*nats.Conn{b.nc, b.ncShards} {
		if nc != nil {
			nc.FlushTimeout(5 * time.Second) //nolint:errcheck
			nc.Close()
		}
	}
	return nil
}
