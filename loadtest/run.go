package loadtest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/queen-mq/queen-go/loadtest/audit"
	"github.com/queen-mq/queen-go/loadtest/chaos"
	"github.com/queen-mq/queen-go/loadtest/clientstats"
	"github.com/queen-mq/queen-go/loadtest/consumers"
	"github.com/queen-mq/queen-go/loadtest/produce"
	"github.com/queen-mq/queen-go/loadtest/report"
	"github.com/queen-mq/queen-go/loadtest/target"
	"github.com/queen-mq/queen-go/loadtest/txnid"
	"github.com/queen-mq/queen-go/persistence"
	"github.com/queen-mq/queen-go/transport/client"
)

// ErrAuditFailed is returned (wrapped, with the report) when the post-run
// audit finds a violation of SPEC.md §12.
var ErrAuditFailed = errors.New("loadtest: the audit failed")

// auditTimeout bounds the audit and the final counts, which also run after
// an interrupt.
const auditTimeout = 10 * time.Minute

// auditEvery is the longest time between two in-run audit passes (they also
// run at least every SampleEvery).
const auditEvery = 2 * time.Second

// Run runs one load test: cfg.Producers producers send batches to the
// broker at cfg.Target (or, in raw mode, COPY them into a fresh raw table)
// for cfg.Duration, then the database is audited (broker mode) or counted
// (raw mode). When ctx ends early the run stops, and the report (with
// Interrupted set) and the audit still come back.
//
// The error is ErrAuditFailed (wrapped) with a non-nil report when the
// audit found violations; other errors mean the run could not be made.
func Run(ctx context.Context, cfg Config) (*report.Report, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return run(ctx, &cfg)
}

// loadRun is one run's parts, shared by its phases (run).
type loadRun struct {
	cfg *Config
	// pc is the producers' share of cfg.
	pc        produce.Config
	parts     []string
	c         *produce.Counters
	producers []*produce.Producer
	// dirty marks the partitions answers came back for (broker mode).
	dirty *audit.DirtySet
	// ledgers are the producers' ledgers (index = producer; broker mode).
	ledgers []*audit.Ledger
	// asyncs replaces producers with ProducerMode async.
	asyncs  []*produce.Async
	audit   *persistence.Audit
	raw     *persistence.RawWriter
	senders []target.Sender
	cp      *consumers.Phase
	// au is the in-run auditor (broker mode), from load.
	au  *audit.Auditor
	rep *report.Report
	// dbStart and dbEnd are the database's figures before the first push and
	// after the producers' last answer (load; DBBytes 0: not read), for
	// the bytes per stored message; storageErr is a failed reading's
	// error.
	dbStart    runStart
	dbEnd      report.TimelinePoint
	storageErr string
}

func run(ctx context.Context, cfg *Config) (*report.Report, error) {
	r := &loadRun{cfg: cfg, pc: cfg.produceConfig(), parts: txnid.PartitionNames(cfg.Partitions), c: &produce.Counters{}, producers: make([]*produce.Producer, cfg.Producers),
		rep: &report.Report{Mode: cfg.Mode, Producers: cfg.Producers, Connections: cfg.Connections, Partitions: cfg.Partitions, Batch: cfg.Batch,
			PayloadBytes: cfg.PayloadBytes, DupRatio: cfg.DupRatio, ProducerMode: report.ProducerSync}}
	if cfg.Mode == report.ModeBroker {
		r.dirty = audit.NewDirtySet(len(r.parts))
		r.c.Dirty = r.dirty
	}
	defer r.close()
	// Open the audit first (both modes report the database's durability):
	// a wrong database URL fails before the load.
	var err error
	if r.audit, err = persistence.OpenAudit(ctx, cfg.DatabaseURL); err != nil {
		return nil, fmt.Errorf("database %s: %w", redact(cfg.DatabaseURL), err)
	}
	switch cfg.Mode {
	case report.ModeBroker:
		err = r.setupBroker(ctx)
	case report.ModeRaw:
		err = r.setupRaw(ctx)
	}
	if err != nil {
		return nil, err
	}
	elapsed := r.load(ctx)
	r.collect(ctx, elapsed)
	if r.cp != nil {
		// The wake probe runs on a queue of its own, after the consumers
		// stopped.
		r.cp.Probe(ctx)
	}
	if err := r.check(ctx); err != nil {
		return r.rep, err
	}
	return r.verdict(elapsed)
}

// close releases what the run opened (deferred by run).
func (r *loadRun) close() {
	if r.cp != nil {
		r.cp.Close()
	}
	for _, s := range r.senders {
		s.Close()
	}
	for _, a := range r.asyncs {
		if a != nil {
			a.Abandon()
		}
	}
	if r.audit != nil {
		r.audit.Close()
	}
	if r.raw != nil {
		r.raw.Close()
	}
}

// setupBroker makes the producers (sync or async), the consume phase, and
// configures the run's queue.
func (r *loadRun) setupBroker(ctx context.Context) error {
	cfg, rep, parts, c := r.cfg, r.rep, r.parts, r.c
	var err error
	rep.Target, rep.Queue = cfg.Target, cfg.Queue
	if cfg.ProducerMode == report.ProducerAsync {
		rep.ProducerMode, rep.InFlight, rep.MaxBatch = report.ProducerAsync, cfg.InFlight, cfg.maxBatch()
		rep.LingerMs = float64(cfg.Linger) / float64(time.Millisecond)
	}
	hc := target.NewHTTPClient(cfg.Producers, cfg.TLS)
	r.ledgers = make([]*audit.Ledger, cfg.Producers)
	for i := range r.ledgers {
		r.ledgers[i] = audit.NewLedger(i, cfg.Queue, parts, cfg.Spread == SpreadSequential)
	}
	if cfg.ProducerMode == report.ProducerAsync {
		r.asyncs = make([]*produce.Async, cfg.Producers)
		r.producers = nil
		// Each async producer has up to MaxInFlight requests open.
		ahc := target.NewHTTPClient(cfg.Producers*client.DefaultMaxInFlight, cfg.TLS)
		for i := range r.asyncs {
			push, closeFn, err := target.AsyncPush(cfg.Target, cfg.Targets, ahc, i, cfg.AdminToken, cfg.NATSOptions...)
			if err != nil {
				return err
			}
			r.asyncs[i] = produce.NewAsync(i, &r.pc, parts, push, closeFn, r.ledgers[i], c)
		}
	}
	shared := make([]*target.NATSSender, cfg.Connections)
	for i := range r.producers {
		var s target.Sender
		owner := true // r.senders (closed at the end) holds each sender once
		if n := cfg.Connections; n > 0 && strings.HasPrefix(cfg.Target, "nats://") {
			// Shared round robin.
			if owner = shared[i%n] == nil; owner {
				if shared[i%n], err = target.NewNATSSender(cfg.Target, i%n, cfg.AdminToken, cfg.NATSOptions...); err != nil {
					return err
				}
			}
			s = shared[i%n]
		} else if strings.HasPrefix(cfg.Target, "nats://") {
			if s, err = target.NewNATSSender(cfg.Target, i, cfg.AdminToken, cfg.NATSOptions...); err != nil {
				return err
			}
		} else if len(cfg.Targets) > 1 {
			s = target.NewFailoverSender(hc, cfg.Targets, i, cfg.AdminToken)
		} else {
			s = target.NewHTTPSender(hc, cfg.AdminToken, cfg.Target)
		}
		if owner {
			r.senders = append(r.senders, s)
		}
		r.producers[i] = produce.New(i, &r.pc, parts, s, r.ledgers[i], c)
	}
	kc := cfg.consumersConfig()
	if cfg.Consumers > 0 {
		if r.cp, err = consumers.New(&kc, parts, consumers.TargetDialer(&kc)); err != nil {
			return err
		}
		c.Touched = r.cp.Touched()
		if err := configureQueue(ctx, cfg, r.cp.Admin()); err != nil {
			return err
		}
	} else if cfg.DedupWindow > 0 || cfg.Retention > 0 {
		cl, err := consumers.TargetDialer(&kc)("queen-loadtest-admin")
		if err != nil {
			return err
		}
		err = configureQueue(ctx, cfg, cl)
		cl.Close()
		if err != nil {
			return err
		}
	}
	rep.DedupWindowSeconds = int(cfg.window() / time.Second)
	rep.RetentionSeconds = int(cfg.Retention / time.Second)
	rep.SampleEverySeconds = cfg.SampleEvery.Seconds()
	return nil
}

// setupRaw makes the raw producers and resets their table.
func (r *loadRun) setupRaw(ctx context.Context) error {
	cfg := r.cfg
	r.rep.Target, r.rep.Table = "postgres", cfg.Table
	var err error
	if r.raw, err = persistence.OpenRaw(ctx, cfg.DatabaseURL); err != nil {
		return fmt.Errorf("raw database %s: %w", redact(cfg.DatabaseURL), err)
	}
	if err := r.raw.Reset(ctx, cfg.Table); err != nil {
		return err
	}
	for i := range r.producers {
		s := &target.RawSender{W: r.raw, Table: cfg.Table}
		r.senders = append(r.senders, s)
		r.producers[i] = produce.New(i, &r.pc, r.parts, s, nil, r.c)
	}
	return nil
}

// load runs the producers (with the consumers, the chaos, the in-run audit
// and the sampler) for the run's Duration and drain, and returns how long
// the producers ran.
func (r *loadRun) load(ctx context.Context) time.Duration {
	cfg, c, cp, rep, producers, asyncs, db, parts := r.cfg, r.c, r.cp, r.rep, r.producers, r.asyncs, r.audit, r.parts
	r.readStart(ctx)
	start := time.Now()
	var faults *chaos.Run
	if cfg.Mode == report.ModeBroker && (cfg.Chaos.Cluster != nil || chaos.On(cfg.Chaos.Mode)) {
		stats := clientstats.New(start)
		c.Obs = stats
		if cp != nil {
			cp.Counters().Obs = stats
		}
		faults = chaos.Start(ctx, cfg.chaosConfig(), stats)
		defer faults.End()
	}
	deadline := start.Add(cfg.Duration)
	drainBy := deadline.Add(cfg.DrainTimeout)
	var cc *consumers.Counters
	if cp != nil {
		cc = cp.Counters()
		cp.Run(ctx, start)
	}
	ledgers := r.ledgers
	var au *audit.Auditor
	var smp *sampler
	if cfg.Mode == report.ModeBroker {
		au = audit.NewAuditor(db, cfg.Queue, parts, ledgers, r.dirty, cfg.Spread == SpreadSequential)
		if cp != nil {
			// The consume audit reads what the storage audit reads, and
			// checks and forgets what every group has passed.
			au.Follow(cp.NewAuditor(cfg.Retention).Stored)
			cp.StartAudit(ctx, db, min(cfg.SampleEvery, auditEvery))
		}
		au.Start(ctx, min(cfg.SampleEvery, auditEvery), cfg.Retention)
	}
	prog := startProgress(cfg, c, cc, start, cfg.Mode == report.ModeBroker)
	if au != nil {
		var backlog func([]persistence.Cursor, int64) []report.GroupBacklog
		if cp != nil {
			backlog = cp.Backlog
		}
		smp = startSampler(ctx, cfg, c, au, db, ledgers, prog, start, r.dbStart, backlog)
	}
	var wg sync.WaitGroup
	for _, p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.Run(ctx, deadline, drainBy)
		}()
	}
	for _, a := range asyncs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.Run(ctx, deadline, drainBy)
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	rep.Timeline = smp.finish()
	if smp != nil {
		rep.SustainedRatio, rep.SustainedRatioMeaningful = report.SustainedRatio(rep.Timeline)
		rep.TimelineError = smp.lastErr
	}
	if faults != nil {
		// No fault after the load; a recovery under way finishes.
		faults.End()
	}
	// Before the consumers drain: their acks are not the load's.
	r.readEnd(ctx)
	if cp != nil {
		// The consumers keep going until they have consumed everything.
		prog.draining()
		cp.Drain(ctx, db)
	}
	prog.finish()
	if faults != nil {
		rep.Cluster, rep.Chaos = faults.Finish()
	}

	r.au = au
	return elapsed
}

// readStart reads the database's figures before the first push.
func (r *loadRun) readStart(ctx context.Context) {
	st, err := r.audit.Stats(ctx, "")
	if err != nil {
		r.dbStart.err = "database stats at the start: " + err.Error()
		r.storageErr = r.dbStart.err
		return
	}
	r.dbStart.sizes = report.TimelinePoint{DBBytes: st.DatabaseBytes, SidecarBytes: st.SidecarBytes}
	r.dbStart.walAt = st.WALPosition
}

// readEnd reads the database's figures after the producers' last answer
// (also after an interrupt).
func (r *loadRun) readEnd(ctx context.Context) {
	if r.dbStart.walAt == "" {
		return // no start to measure from
	}
	ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	st, err := r.audit.Stats(ectx, r.dbStart.walAt)
	if err != nil {
		r.storageErr = "database stats at the end: " + err.Error()
		return
	}
	r.dbEnd = report.TimelinePoint{DBBytes: st.DatabaseBytes, SidecarBytes: st.SidecarBytes, WALBytes: st.WALBytes}
}

// collect fills the report's counts from the producers' counters.
func (r *loadRun) collect(ctx context.Context, elapsed time.Duration) {
	rep, c, producers, asyncs := r.rep, r.c, r.producers, r.asyncs
	rep.Interrupted = ctx.Err() != nil
	rep.Seconds = math.Round(elapsed.Seconds()*1000) / 1000
	rep.Requests, rep.RequestErrors = c.Requests.Load(), c.RequestErrors.Load()
	rep.ItemsSent, rep.NewItems, rep.Repeats, rep.Retries = c.Sent.Load(), c.Fresh.Load(), c.Repeats.Load(), c.Retries.Load()
	rep.ItemsPerSecond = report.PerSecond(rep.ItemsSent, elapsed.Seconds())
	rep.GaveUp, rep.Rejected, rep.UnknownOutcome = c.GaveUp.Load(), c.Rejected.Load(), c.UnknownOutcome.Load()
	rep.Verdicts = report.Verdicts{Queued: c.Queued.Load(), Duplicate: c.Duplicate.Load(), Failed: c.Failed.Load()}
	for _, p := range producers {
		for code, n := range p.Codes() {
			if rep.ErrorCodes == nil {
				rep.ErrorCodes = map[string]int64{}
			}
			rep.ErrorCodes[code] += n
		}
		if e := p.LastError(); e != "" {
			rep.LastError = e
		}
	}
	for _, a := range asyncs {
		for code, n := range a.Codes() {
			if rep.ErrorCodes == nil {
				rep.ErrorCodes = map[string]int64{}
			}
			rep.ErrorCodes[code] += n
		}
		if e := a.LastError(); e != "" {
			rep.LastError = e
		}
	}
	rep.Latency = c.Lat.Latency()
	if n := c.WindowGuard.Load(); n > 0 {
		if rep.ErrorCodes == nil {
			rep.ErrorCodes = map[string]int64{}
		}
		rep.ErrorCodes["gave_up:window_guard"] = n
	}
}

// check runs the audit (broker mode) or counts the table (raw mode), even
// after an interrupt.
func (r *loadRun) check(ctx context.Context) error {
	cfg, rep, db, raw, cp, au := r.cfg, r.rep, r.audit, r.raw, r.cp, r.au
	// The audit and counts run even after an interrupt.
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), auditTimeout)
	defer cancel()
	if cfg.AfterLoad != nil {
		if err := cfg.AfterLoad(actx); err != nil {
			return fmt.Errorf("after the load: %w", err)
		}
	}
	d, err := db.Durability(actx)
	if err != nil {
		return fmt.Errorf("read the durability settings: %w", err)
	}
	rep.Postgres = report.Durability{Fsync: d.Fsync, SynchronousCommit: d.SynchronousCommit, FullPageWrites: d.FullPageWrites}
	switch cfg.Mode {
	case report.ModeBroker:
		// Without retention everything is still stored: the final pass
		// recounts it all. The consume audit saw every frame as the
		// passes read it (Follow), the last pass's too.
		ar, err := au.Finish(actx, cfg.Retention == 0, nil)
		if err != nil {
			return fmt.Errorf("audit: %w", err)
		}
		rep.Audit = ar
		rep.StoredMessages = ar.StoredMessages
		if cp != nil {
			ca, err := cp.FinishAudit(actx, db, !rep.Interrupted)
			if err != nil {
				return fmt.Errorf("audit: %w", err)
			}
			rep.Consume = cp.Report(ca)
		}
	case report.ModeRaw:
		n, err := raw.Count(actx, cfg.Table)
		if err != nil {
			return fmt.Errorf("count raw rows: %w", err)
		}
		rep.StoredMessages = n
		if cfg.DropTable {
			if err := raw.Drop(actx, cfg.Table); err != nil {
				return fmt.Errorf("drop raw table: %w", err)
			}
		}
	}
	return nil
}

// verdict is the run's error: no verdict at all, or a failed audit.
func (r *loadRun) verdict(elapsed time.Duration) (*report.Report, error) {
	cfg, rep := r.cfg, r.rep
	rep.StoredPerSecond = report.PerSecond(rep.StoredMessages, elapsed.Seconds())
	// Every message the run stored was stored between the two readings.
	end := r.dbEnd
	end.StoredMessages = rep.StoredMessages
	pm := storagePerMessage(r.dbStart.sizes, end)
	rep.WALBytesPerMessage, rep.DBBytesPerMessage, rep.SidecarBytesPerMessage = pm.WAL, pm.DB, pm.Sidecar
	rep.StorageError = r.storageErr

	if rep.Verdicts.Queued+rep.Verdicts.Duplicate == 0 && !rep.Interrupted {
		return rep, fmt.Errorf("no item got a verdict in %s (last error: %s)", elapsed.Truncate(time.Millisecond), rep.LastError)
	}
	if rep.Audit != nil && !rep.Audit.Passed {
		var n int64
		for _, c := range rep.Audit.Issues {
			n += c
		}
		return rep, fmt.Errorf("%w: %d violations of SPEC.md §12 in queue %s", ErrAuditFailed, n, cfg.Queue)
	}
	if rep.Consume != nil && !rep.Consume.Audit.Passed {
		return rep, errConsumeAudit(rep.Consume.Audit, cfg.Queue)
	}
	return rep, nil
}

// configureQueue configures the run's queue through cl before the load:
// leaseTime and retryLimit when consuming (consumers.Config.QueueOptions),
// dedupWindowSeconds and retentionSeconds when set. Configure is a full
// replace (SPEC.md §6): every other option goes back to its default, which
// is what the run's queue had before (the harness never configured it
// otherwise). The reply must echo what the audit counts with.
func configureQueue(ctx context.Context, cfg *Config, cl target.ConsumeClient) error {
	want := map[string]int{}
	if cfg.Consumers > 0 {
		kc := cfg.consumersConfig()
		want = kc.QueueOptions()
	}
	if cfg.DedupWindow > 0 {
		want["dedupWindowSeconds"] = int(cfg.DedupWindow / time.Second)
	}
	if cfg.Retention > 0 {
		want["retentionSeconds"] = int(cfg.Retention / time.Second)
	}
	return target.ConfigureQueue(ctx, cl, cfg.Queue, want, cfg.RequestTimeout)
}

// errConsumeAudit wraps ErrAuditFailed for a failed consume audit.
func errConsumeAudit(a *report.ConsumeAudit, queue string) error {
	var n int64
	for _, c := range a.Issues {
		n += c
	}
	return fmt.Errorf("%w: %d violations of the end-to-end consume audit in queue %s", ErrAuditFailed, n, queue)
}

// redact hides a URL's password for messages.
func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}

// Compare runs broker and raw alternately, rounds times each (3 when
// rounds <= 0), each on a fresh queue or raw table (the raw tables are
// dropped after counting), and reports each round and the median ratio of
// stored messages per second (broker/raw). The raw runs write into
// cfg.DatabaseURL, the broker's database. When ctx ends the rounds stop and
// the completed ones are reported. A failed audit is ErrAuditFailed
// (wrapped), returned with the comparison after the last round.
func Compare(ctx context.Context, cfg Config, rounds int) (*report.Comparison, error) {
	if rounds <= 0 {
		rounds = 3
	}
	cfg.Mode = report.ModeBroker
	if cfg.Consumers > 0 {
		return nil, errors.New("--compare measures pushes against raw COPY: run it without consumers")
	}
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cmp := &report.Comparison{}
	var auditErr error
	var ratios []float64
	for i := 1; i <= rounds && ctx.Err() == nil; i++ {
		stamp := time.Now().UnixNano()
		b := cfg
		b.Mode, b.Queue, b.Label = report.ModeBroker, fmt.Sprintf("loadtest-%d-r%d", stamp, i), fmt.Sprintf("round %d broker", i)
		br, err := run(ctx, &b)
		if err != nil && !errors.Is(err, ErrAuditFailed) {
			return cmp, fmt.Errorf("round %d broker: %w", i, err)
		}
		if err != nil {
			auditErr = fmt.Errorf("round %d: %w", i, err)
		}
		rd := report.Round{Round: i, Broker: br}
		if ctx.Err() == nil {
			r := cfg
			r.Mode, r.Table, r.DropTable, r.Label = report.ModeRaw, fmt.Sprintf("loadtest_%d_r%d", stamp, i), true, fmt.Sprintf("round %d raw", i)
			rr, err := run(ctx, &r)
			if err != nil {
				return cmp, fmt.Errorf("round %d raw: %w", i, err)
			}
			if !rr.Interrupted {
				rd.Raw = rr
				if rr.StoredPerSecond > 0 {
					rd.Ratio = math.Round(br.StoredPerSecond/rr.StoredPerSecond*1000) / 1000
					ratios = append(ratios, rd.Ratio)
				}
			}
		}
		cmp.Rounds = append(cmp.Rounds, rd)
	}
	cmp.Interrupted = ctx.Err() != nil
	cmp.MedianRatio = report.Median(ratios)
	return cmp, auditErr
}
