package transport

import (
	"math"
	"net/http"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/transport/wire"
)

// statsWindow is how far back GET /api/v1/stats looks for the sample its
// rates are computed against: rates are averages over about this long.
const statsWindow = 5 * time.Second

// statsKeep is how long samples are kept (they are taken only when the route
// is asked, so an idle console costs nothing).
const statsKeep = time.Minute

// statsSample is one read of the registry's cumulative counters.
type statsSample struct {
	at                      time.Time
	queued, duplicate, fail float64
	pops, acks, acked       float64
	commits                 float64
	// buckets are queen_push_commit_seconds' cumulative bucket counts, by
	// upper bound in seconds.
	bounds, buckets []float64
	// wal, db and stored are the storage gauges (queen_storage_*): the
	// WAL position and the database's size in bytes, and the messages
	// stored when they were read; 0 before their first read.
	wal, db, stored float64
}

// statsRing keeps the samples of GET /api/v1/stats.
type statsRing struct {
	mu      sync.Mutex
	samples []statsSample
}

// stats answers GET /api/v1/stats: live rates and gauges read from the
// broker's Prometheus registry (the ones the console's overview draws), 200
// with a wire.StatsReply. It keeps the samples it reads for a minute, so
// rates are averages over the last few seconds of calls.
func (s *Service) stats() reply {
	mfs, err := s.cfg.Metrics.Registry.Gather()
	if err != nil && len(mfs) == 0 {
		return errReply(err)
	}
	now := time.Now()
	cur := statsSample{at: now}
	out := wire.StatsReply{At: now.UTC()}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "queen_push_items_total":
			for _, m := range mf.GetMetric() {
				v := m.GetCounter().GetValue()
				switch label(m, "verdict") {
				case "queued":
					cur.queued += v
				case "duplicate":
					cur.duplicate += v
				default:
					cur.fail += v
				}
			}
		case "queen_pop_messages_total":
			cur.pops = sum(mf)
		case "queen_ack_items_total":
			cur.acks = sum(mf)
			for _, m := range mf.GetMetric() {
				if label(m, "result") == string(queen.Acked) {
					cur.acked += m.GetCounter().GetValue()
				}
			}
		case "queen_push_commit_seconds":
			for _, m := range mf.GetMetric() {
				h := m.GetHistogram()
				cur.commits = float64(h.GetSampleCount())
				for _, b := range h.GetBucket() {
					cur.bounds = append(cur.bounds, b.GetUpperBound())
					cur.buckets = append(cur.buckets, float64(b.GetCumulativeCount()))
				}
			}
		case "process_resident_memory_bytes":
			out.RSSBytes = int64(sum(mf))
		case "queen_dedup_cache_bytes":
			out.CacheBytes = int64(sum(mf))
		case "queen_mailbox_depth_items":
			out.MailboxDepth = int64(sum(mf))
		case "queen_storage_wal_bytes":
			cur.wal = sum(mf)
		case "queen_storage_database_bytes":
			cur.db = sum(mf)
			out.DatabaseBytes = int64(cur.db)
		case "queen_storage_stored_messages":
			cur.stored = sum(mf)
		}
	}
	out.Queued, out.Duplicate, out.Failed = int64(cur.queued), int64(cur.duplicate), int64(cur.fail)

	s.statsRing.mu.Lock()
	kept := s.statsRing.samples[:0]
	for _, p := range s.statsRing.samples {
		if now.Sub(p.at) <= statsKeep {
			kept = append(kept, p)
		}
	}
	var base *statsSample
	for i := range kept { // the oldest sample within the window, else the newest before it
		if now.Sub(kept[i].at) <= statsWindow {
			base = &kept[i]
			break
		}
	}
	if base == nil && len(kept) > 0 {
		base = &kept[len(kept)-1]
	}
	var prev statsSample
	if base != nil {
		prev = *base
	}
	out.WALBytesPerMessage, out.DatabaseBytesPerMessage = storagePerMessage(kept, cur)
	s.statsRing.samples = append(kept, cur)
	s.statsRing.mu.Unlock()

	if base == nil {
		return reply{status: http.StatusOK, body: out}
	}
	dt := now.Sub(prev.at).Seconds()
	if dt <= 0 {
		return reply{status: http.StatusOK, body: out}
	}
	out.WindowSeconds = dt
	rate := func(a, b float64) float64 { return math.Max(0, a-b) / dt }
	out.QueuedPerSecond = rate(cur.queued, prev.queued)
	out.DuplicatePerSecond = rate(cur.duplicate, prev.duplicate)
	out.FailedPerSecond = rate(cur.fail, prev.fail)
	out.PopPerSecond = rate(cur.pops, prev.pops)
	out.AckPerSecond = rate(cur.acks, prev.acks)
	out.AckedPerSecond = rate(cur.acked, prev.acked)
	out.CommitP50Ms = commitQuantileMs(cur, prev, 0.5)
	out.CommitP99Ms = commitQuantileMs(cur, prev, 0.99)
	return reply{status: http.StatusOK, body: out}
}

// storagePerMessage is the WAL and database growth per stored message
// between the storage gauges' oldest read among the kept samples and cur's
// (StatsReply.WALBytesPerMessage): nil, nil until messages were stored
// between two reads; the database's nil when it shrank.
func storagePerMessage(kept []statsSample, cur statsSample) (wal, db *float64) {
	for _, p := range kept {
		if p.wal <= 0 || cur.wal <= 0 {
			continue
		}
		n := cur.stored - p.stored
		if n <= 0 {
			return nil, nil
		}
		w := math.Max(0, cur.wal-p.wal) / n
		wal = &w
		if cur.db >= p.db {
			d := (cur.db - p.db) / n
			db = &d
		}
		return wal, db
	}
	return nil, nil
}

// commitQuantileMs is the q-quantile of the push commits between prev and
// cur: the upper bound of the first bucket holding it (the last bucket's
// bound beyond it), milliseconds; nil when no push committed between them.
func commitQuantileMs(cur, prev statsSample, q float64) *float64 {
	n := cur.commits - prev.commits
	if n <= 0 || len(cur.buckets) != len(prev.buckets) || len(cur.bounds) == 0 {
		return nil
	}
	p := cur.bounds[len(cur.bounds)-1]
	for i := range cur.buckets {
		if cur.buckets[i]-prev.buckets[i] >= q*n {
			p = cur.bounds[i]
			break
		}
	}
	ms := p * 1000
	return &ms
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// sum adds a family's counter, gauge or untyped values.
func sum(mf *dto.MetricFamily) float64 {
	var v float64
	for _, m := range mf.GetMetric() {
		switch {
		case m.Counter != nil:
			v += m.GetCounter().GetValue()
		case m.Gauge != nil:
			v += m.GetGauge().GetValue()
		case m.Untyped != nil:
			v += m.GetUntyped().GetValue()
		}
	}
	return v
}
