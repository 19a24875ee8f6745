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

	"github.com/queen-mq/queen-go/persistence"
	"github.com/queen-mq/queen-go/transport"
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
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return run(ctx, &cfg)
}

func run(ctx context.Context, cfg *Config) (*Report, error) {
	parts := partitionNames(cfg.Partitions)
	c := &counters{}
	if cfg.Mode == ModeBroker {
		c.dirty = newDirtySet(len(parts))
	}
	producers := make([]*producer, cfg.Producers)
	// asyncs replaces producers with ProducerMode async.
	var asyncs []*asyncProducer
	var audit *persistence.Audit
	var raw *persistence.RawWriter
	var senders []sender
	var cp *consumePhase
	defer func() {
		if cp != nil {
			cp.close()
		}
		for _, s := range senders {
			s.close()
		}
		for _, a := range asyncs {
			if a != nil {
				// After its run: a no-op. Before (the run failed to
				// start): nothing was published.
				ended, cancel := context.WithCancel(context.Background())
				cancel()
				_ = a.prod.Close(ended)
				a.close()
			}
		}
		if audit != nil {
			audit.Close()
		}
		if raw != nil {
			raw.Close()
		}
	}()

	rep := &Report{Mode: cfg.Mode, Producers: cfg.Producers, Partitions: cfg.Partitions, Batch: cfg.Batch,
		PayloadBytes: cfg.PayloadBytes, DupRatio: cfg.DupRatio, ProducerMode: ProducerSync}
	// Open the audit first (both modes report the database's durability):
	// a wrong database URL fails before the load.
	var err error
	if audit, err = persistence.OpenAudit(ctx, cfg.DatabaseURL); err != nil {
		return nil, fmt.Errorf("database %s: %w", redact(cfg.DatabaseURL), err)
	}
	switch cfg.Mode {
	case ModeBroker:
		rep.Target, rep.Queue = cfg.Target, cfg.Queue
		if cfg.ProducerMode == ProducerAsync {
			rep.ProducerMode, rep.InFlight, rep.MaxBatch = ProducerAsync, cfg.InFlight, cfg.maxBatch()
			rep.LingerMs = float64(cfg.Linger) / float64(time.Millisecond)
		}
		hc := newHTTPClient(cfg.Producers)
		if cfg.ProducerMode == ProducerAsync {
			asyncs = make([]*asyncProducer, cfg.Producers)
			producers = nil
			// Each async producer has up to MaxInFlight requests open.
			ahc := newHTTPClient(cfg.Producers * transport.DefaultMaxInFlight)
			for i := range asyncs {
				push, closeFn, err := asyncPush(cfg, ahc, i)
				if err != nil {
					return nil, err
				}
				asyncs[i] = newAsyncProducer(i, cfg, parts, push, closeFn, newRunLedger(cfg, i, parts), c)
			}
		}
		for i := range producers {
			var s sender
			if strings.HasPrefix(cfg.Target, "nats://") {
				if s, err = newNATSSender(cfg.Target, i); err != nil {
					return nil, err
				}
			} else if len(cfg.Targets) > 1 {
				s = newFailoverSender(hc, cfg.Targets, i)
			} else {
				s = &httpSender{hc: hc, url: strings.TrimRight(cfg.Target, "/") + "/api/v1/push"}
			}
			senders = append(senders, s)
			producers[i] = newProducer(i, cfg, parts, s, newRunLedger(cfg, i, parts), c)
		}
		if cfg.Consumers > 0 {
			if cp, err = newConsumePhase(cfg, parts, targetDialer(cfg)); err != nil {
				return nil, err
			}
			c.touched = cp.touched
			if err := configureQueue(ctx, cfg, cp.admin); err != nil {
				return nil, err
			}
		} else if cfg.DedupWindow > 0 || cfg.Retention > 0 {
			cl, err := targetDialer(cfg)("queen-loadtest-admin")
			if err != nil {
				return nil, err
			}
			err = configureQueue(ctx, cfg, cl)
			cl.close()
			if err != nil {
				return nil, err
			}
		}
		rep.DedupWindowSeconds = int(cfg.window() / time.Second)
		rep.RetentionSeconds = int(cfg.Retention / time.Second)
		rep.SampleEverySeconds = cfg.SampleEvery.Seconds()
	case ModeRaw:
		rep.Target, rep.Table = "postgres", cfg.Table
		if raw, err = persistence.OpenRaw(ctx, cfg.DatabaseURL); err != nil {
			return nil, fmt.Errorf("raw database %s: %w", redact(cfg.DatabaseURL), err)
		}
		if err := raw.Reset(ctx, cfg.Table); err != nil {
			return nil, err
		}
		for i := range producers {
			s := &rawSender{w: raw, table: cfg.Table}
			senders = append(senders, s)
			producers[i] = newProducer(i, cfg, parts, s, nil, c)
		}
	}

	start := time.Now()
	var chaos *chaosRun
	if cfg.Mode == ModeBroker && (cfg.Cluster != nil || chaosOn(cfg.Chaos)) {
		stats := newClientStats(start)
		c.obs = stats
		if cp != nil {
			cp.c.obs = stats
		}
		chaos = startChaos(ctx, cfg, stats)
		defer chaos.endChaos()
	}
	deadline := start.Add(cfg.Duration)
	drainBy := deadline.Add(cfg.DrainTimeout)
	var cc *consumeCounters
	if cp != nil {
		cc = &cp.c
		cp.run(ctx, start)
	}
	var ledgers []*ledger
	var au *auditor
	var smp *sampler
	if cfg.Mode == ModeBroker {
		for _, p := range producers {
			ledgers = append(ledgers, p.led)
		}
		for _, a := range asyncs {
			ledgers = append(ledgers, a.led)
		}
		au = newAuditor(audit, cfg.Queue, parts, ledgers, c.dirty)
		au.sequential = cfg.Spread == SpreadSequential
		au.start(ctx, min(cfg.SampleEvery, auditEvery))
	}
	prog := startProgress(cfg, c, cc, start, cfg.Mode == ModeBroker)
	if au != nil {
		smp = startSampler(ctx, cfg, c, au, audit, ledgers, prog, start)
	}
	var wg sync.WaitGroup
	for _, p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.run(ctx, deadline, drainBy)
		}()
	}
	for _, a := range asyncs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.run(ctx, deadline, drainBy)
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	rep.Timeline = smp.finish()
	if smp != nil {
		rep.SustainedRatio, rep.SustainedRatioMeaningful = SustainedRatio(rep.Timeline)
		rep.TimelineError = smp.lastErr
	}
	if chaos != nil {
		// No fault after the load; a recovery under way finishes.
		chaos.endChaos()
	}
	if cp != nil {
		// The consumers keep going until they have consumed everything.
		prog.draining()
		cp.drain(ctx, audit)
	}
	prog.finish()
	if chaos != nil {
		rep.Cluster, rep.Chaos = chaos.finish()
	}

	rep.Interrupted = ctx.Err() != nil
	rep.Seconds = math.Round(elapsed.Seconds()*1000) / 1000
	rep.Requests, rep.RequestErrors = c.requests.Load(), c.requestErrors.Load()
	rep.ItemsSent, rep.NewItems, rep.Repeats, rep.Retries = c.sent.Load(), c.fresh.Load(), c.repeats.Load(), c.retries.Load()
	rep.ItemsPerSecond = perSecond(rep.ItemsSent, elapsed.Seconds())
	rep.GaveUp, rep.Rejected, rep.UnknownOutcome = c.gaveUp.Load(), c.rejected.Load(), c.unknownOutcome.Load()
	rep.Verdicts = Verdicts{Queued: c.queued.Load(), Duplicate: c.duplicate.Load(), Failed: c.failed.Load()}
	for _, p := range producers {
		for code, n := range p.codes {
			if rep.ErrorCodes == nil {
				rep.ErrorCodes = map[string]int64{}
			}
			rep.ErrorCodes[code] += n
		}
		if p.lastError != "" {
			rep.LastError = p.lastError
		}
	}
	for _, a := range asyncs {
		for code, n := range a.codes {
			if rep.ErrorCodes == nil {
				rep.ErrorCodes = map[string]int64{}
			}
			rep.ErrorCodes[code] += n
		}
		if a.lastError != "" {
			rep.LastError = a.lastError
		}
	}
	rep.Latency = c.lat.latency()
	if n := c.windowGuard.Load(); n > 0 {
		if rep.ErrorCodes == nil {
			rep.ErrorCodes = map[string]int64{}
		}
		rep.ErrorCodes["gave_up:window_guard"] = n
	}

	if cp != nil {
		// The wake probe runs on a queue of its own, after the consumers stopped.
		cp.probe(ctx)
	}

	// The audit and counts run even after an interrupt.
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), auditTimeout)
	defer cancel()
	if cfg.AfterLoad != nil {
		if err := cfg.AfterLoad(actx); err != nil {
			return rep, fmt.Errorf("after the load: %w", err)
		}
	}
	d, err := audit.Durability(actx)
	if err != nil {
		return rep, fmt.Errorf("read the durability settings: %w", err)
	}
	rep.Postgres = d
	switch cfg.Mode {
	case ModeBroker:
		var ca *consumeAuditor
		var also func(*persistence.StoredMessage)
		if cp != nil {
			if ca, err = cp.newAuditor(actx, audit, !rep.Interrupted); err != nil {
				return rep, fmt.Errorf("audit: %w", err)
			}
			also = ca.stored
		}
		// Without retention everything is still stored: the final pass
		// recounts it all.
		ar, err := au.finish(actx, cfg.Retention == 0, also)
		if err != nil {
			return rep, fmt.Errorf("audit: %w", err)
		}
		rep.Audit = ar
		rep.StoredMessages = ar.StoredMessages
		if cp != nil {
			cursors, err := audit.Cursors(actx, []string{cfg.Queue})
			if err != nil {
				return rep, fmt.Errorf("audit: read the cursors: %w", err)
			}
			rep.Consume = cp.report(ca, ca.finish(cursors))
		}
	case ModeRaw:
		n, err := raw.Count(actx, cfg.Table)
		if err != nil {
			return rep, fmt.Errorf("count raw rows: %w", err)
		}
		rep.StoredMessages = n
		if cfg.DropTable {
			if err := raw.Drop(actx, cfg.Table); err != nil {
				return rep, fmt.Errorf("drop raw table: %w", err)
			}
		}
	}
	rep.StoredPerSecond = perSecond(rep.StoredMessages, elapsed.Seconds())

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
func Compare(ctx context.Context, cfg Config, rounds int) (*Comparison, error) {
	if rounds <= 0 {
		rounds = 3
	}
	cfg.Mode = ModeBroker
	if cfg.Consumers > 0 {
		return nil, errors.New("--compare measures pushes against raw COPY: run it without consumers")
	}
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cmp := &Comparison{}
	var auditErr error
	var ratios []float64
	for i := 1; i <= rounds && ctx.Err() == nil; i++ {
		stamp := time.Now().UnixNano()
		b := cfg
		b.Mode, b.Queue, b.Label = ModeBroker, fmt.Sprintf("loadtest-%d-r%d", stamp, i), fmt.Sprintf("round %d broker", i)
		br, err := run(ctx, &b)
		if err != nil && !errors.Is(err, ErrAuditFailed) {
			return cmp, fmt.Errorf("round %d broker: %w", i, err)
		}
		if err != nil {
			auditErr = fmt.Errorf("round %d: %w", i, err)
		}
		rd := Round{Round: i, Broker: br}
		if ctx.Err() == nil {
			r := cfg
			r.Mode, r.Table, r.DropTable, r.Label = ModeRaw, fmt.Sprintf("loadtest_%d_r%d", stamp, i), true, fmt.Sprintf("round %d raw", i)
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
	cmp.MedianRatio = median(ratios)
	return cmp, auditErr
}
