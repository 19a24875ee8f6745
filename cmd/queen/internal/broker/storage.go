package broker

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/queen-mq/queen-go/metrics"
	"github.com/queen-mq/queen-go/persistence"
)

// storageEvery is how often the broker samples the database's size and WAL
// position for its storage gauges.
const storageEvery = 10 * time.Second

// storageSampler keeps the gauges queen_storage_wal_bytes (the database
// server's WAL position in bytes: all it has written),
// queen_storage_database_bytes (pg_database_size) and
// queen_storage_stored_messages (this broker's push items answered queued
// when they were read) up to date, reading them every interval on the pool
// (persistence.Store.StorageStats): GET /api/v1/stats turns them into WAL
// and database bytes per stored message for the console's timeline. A
// failed read leaves the gauges as they were.
type storageSampler struct {
	store           *persistence.Store
	queued          prometheus.Counter
	every           time.Duration
	wal, db, stored prometheus.Gauge
	stop, done      chan struct{}
}

// newStorageSampler registers the gauges on m.
func newStorageSampler(store *persistence.Store, m *metrics.Set, every time.Duration) *storageSampler {
	s := &storageSampler{store: store, queued: m.PushItems.WithLabelValues("queued"), every: every,
		wal: prometheus.NewGauge(prometheus.GaugeOpts{Name: "queen_storage_wal_bytes",
			Help: "The database server's WAL position in bytes (all the WAL it has written), read every 10 s: its increase over the messages stored is WAL per message (in a cluster, every broker's writes)."}),
		db: prometheus.NewGauge(prometheus.GaugeOpts{Name: "queen_storage_database_bytes",
			Help: "pg_database_size of the broker's database in bytes, read every 10 s."}),
		stored: prometheus.NewGauge(prometheus.GaugeOpts{Name: "queen_storage_stored_messages",
			Help: "queen_push_items_total{verdict=\"queued\"} when queen_storage_wal_bytes and queen_storage_database_bytes were last read."}),
		stop: make(chan struct{}), done: make(chan struct{})}
	m.Registry.MustRegister(s.wal, s.db, s.stored)
	return s
}

// Start samples once, then every interval until Stop.
func (s *storageSampler) Start(context.Context) error {
	go func() {
		defer close(s.done)
		t := time.NewTicker(s.every)
		defer t.Stop()
		for {
			s.sample()
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return nil
}

func (s *storageSampler) sample() {
	ctx, cancel := context.WithTimeout(context.Background(), s.every)
	defer cancel()
	var before dto.Metric
	if s.queued.Write(&before) != nil {
		return
	}
	st, err := s.store.StorageStats(ctx)
	if err != nil {
		return
	}
	s.wal.Set(float64(st.WALBytes))
	s.db.Set(float64(st.DatabaseBytes))
	s.stored.Set(before.GetCounter().GetValue())
}

// Stop ends the sampling.
func (s *storageSampler) Stop(context.Context) error {
	close(s.stop)
	<-s.done
	return nil
}
