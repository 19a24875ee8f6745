package persistence

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

//go:embed migrations/*.sql
var migrationsFS embed.FS

// Migration is one versioned schema change: migrations/NNNN_name.sql.
type Migration struct {
	Version int
	Name    string
	SQL     string
	// Layout is the storage layout generation the migration introduces, from
	// its header's LayoutMarker line; 0 when it is not a layout migration
	// (SPEC.md §2).
	Layout int
}

// LayoutMarker starts the header comment line that makes a migration a
// layout migration: "-- queen:layout 1". A layout migration changes what a
// push must read to decide a verdict, so a broker built before it would
// answer `queued` for ids the new layout holds (SPEC.md §2). The number after
// the marker is the migration's layout generation, a whole number above
// every earlier migration's; a broker's generation is the highest marker it
// embeds (LayoutGeneration). The marker counts only among the comment lines
// at the top of the file, before the first statement.
//
// A layout migration must also make the push statements of the brokers
// before it fail (remove or rename what they write to): brokers that predate
// the version guard do not advertise a generation and do not refuse a newer
// schema, and a broker that passed its own migration check just before the
// layout migration was applied registers only after the check ran, so
// failing closed is their only protection (README, Upgrading).
const LayoutMarker = "-- queen:layout "

// brokerLayoutVersion is the migration that adds queen.brokers.layout, which
// the check before a layout migration reads: a layout marker on an earlier
// migration is refused.
const brokerLayoutVersion = 15

// embedded is the binary's migrations in version order, read once; a
// malformed file is a build-time bug.
var embedded = func() []Migration {
	m, err := readMigrations()
	if err != nil {
		panic(err)
	}
	return m
}()

// Migrations returns the embedded migrations in version order. The error is
// always nil (the files are checked when the package loads); it is kept for
// callers written against the earlier signature.
func Migrations() ([]Migration, error) {
	return append([]Migration(nil), embedded...), nil
}

// SchemaVersion is this binary's schema version: the version of the newest
// migration it embeds. A database whose queen.schema_migrations holds a
// version this binary does not embed is refused (SchemaTooNewError; SPEC.md
// §2).
func SchemaVersion() int { return embedded[len(embedded)-1].Version }

// LayoutGeneration is the storage layout generation this binary reads and
// writes: the highest LayoutMarker among its migrations, 0 while none is
// marked (every layout up to migration 0015, and every broker that predates
// the version guard, is generation 0). Brokers advertise it in
// queen.brokers.layout; a layout migration of generation G is refused while
// a live broker advertises less than G (LayoutBlockedError; SPEC.md §2).
func LayoutGeneration() int {
	g := 0
	for _, m := range embedded {
		g = max(g, m.Layout)
	}
	return g
}

func readMigrations() ([]Migration, error) {
	entries, err := migrationsFS.ReadDir("migrations")
	if err != nil {
		return nil, err
	}
	var out []Migration
	for _, e := range entries {
		b, err := migrationsFS.ReadFile("migrations/" + e.Name())
		if err != nil {
			return nil, err
		}
		m, err := parseMigration(e.Name(), string(b))
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	if len(out) == 0 {
		return nil, errors.New("persistence: no migrations embedded")
	}
	return checkMigrations(out)
}

// parseMigration reads the migration in file NNNN_name.sql: its version,
// name and layout marker.
func parseMigration(file, text string) (Migration, error) {
	base := strings.TrimSuffix(file, ".sql")
	num, name, ok := strings.Cut(base, "_")
	v, err := strconv.Atoi(num)
	if !ok || err != nil || v <= 0 {
		return Migration{}, fmt.Errorf("persistence: bad migration file name %q", file)
	}
	m := Migration{Version: v, Name: name, SQL: text}
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if !strings.HasPrefix(line, "--") {
			break // the header ends at the first statement
		}
		if rest, found := strings.CutPrefix(line, LayoutMarker); found {
			g, err := strconv.Atoi(strings.TrimSpace(rest))
			if err != nil || g <= 0 {
				return Migration{}, fmt.Errorf("persistence: migration %s: bad layout marker %q: want %q followed by a whole number above 0", file, line, LayoutMarker)
			}
			if m.Layout != 0 {
				return Migration{}, fmt.Errorf("persistence: migration %s: two layout markers", file)
			}
			m.Layout = g
		}
	}
	return m, nil
}

// checkMigrations sorts ms by version and checks that versions are unique,
// that layout generations increase with the version, and that no layout
// migration comes before the one that lets brokers advertise their
// generation.
func checkMigrations(ms []Migration) ([]Migration, error) {
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	gen, genAt := 0, 0
	for i, m := range ms {
		if i > 0 && ms[i-1].Version == m.Version {
			return nil, fmt.Errorf("persistence: two migrations with version %04d", m.Version)
		}
		if m.Layout == 0 {
			continue
		}
		if m.Version <= brokerLayoutVersion {
			return nil, fmt.Errorf("persistence: migration %04d_%s: a layout marker needs a version above %04d (queen.brokers.layout)", m.Version, m.Name, brokerLayoutVersion)
		}
		if m.Layout <= gen {
			return nil, fmt.Errorf("persistence: migration %04d_%s: layout generation %d does not increase on %04d's %d", m.Version, m.Name, m.Layout, genAt, gen)
		}
		gen, genAt = m.Layout, m.Version
	}
	return ms, nil
}

// SchemaTooNewError is Migrate's refusal of a database whose
// queen.schema_migrations holds versions this binary does not embed, in
// practice a database an upgrade migrated past this release: a broker never
// starts on a schema holding migrations it does not know (SPEC.md §2).
// Nothing was applied.
type SchemaTooNewError struct {
	// Database is the highest version the database holds.
	Database int
	// Binary is this binary's SchemaVersion.
	Binary int
	// Unknown lists the versions the database holds and this binary does not
	// embed, in order.
	Unknown []int
}

func (e *SchemaTooNewError) Error() string {
	return fmt.Sprintf("persistence: the database's schema is at version %d but this binary knows schema version %d at most (migrations it does not know: %s): run a newer release of queen; rolling back to this one needs a backup taken before the upgrade",
		e.Database, e.Binary, versionList(e.Unknown))
}

// OlderBroker is a live broker that reads a layout older than a pending
// layout migration's (LayoutBlockedError).
type OlderBroker struct {
	ID      uuid.UUID
	HTTPURL string
	// Layout is the generation it advertises (0 for a broker that predates
	// the version guard).
	Layout int
	// Release is the release it advertises ("" before 0.2.0).
	Release string
	// ExpiresAt is when it stops counting as live without a heartbeat
	// (PostgreSQL's clock).
	ExpiresAt time.Time
}

// LayoutBlockedError is Migrate's refusal to apply a layout migration (its
// generation Layout) while live brokers read an older layout: a broker does
// not start writing a layout that a live older broker cannot read (SPEC.md
// §2). Migrations before that one may have been applied; it was not. Stop
// (or upgrade) the brokers named, then start again: across a layout
// migration a rolling upgrade stops the old brokers first.
type LayoutBlockedError struct {
	Version int
	Name    string
	Layout  int
	Brokers []OlderBroker
}

func (e *LayoutBlockedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "persistence: migration %04d_%s changes the storage layout to generation %d, which %d live broker(s) cannot read:", e.Version, e.Name, e.Layout, len(e.Brokers))
	for i, o := range e.Brokers {
		if i > 0 {
			b.WriteString(",")
		}
		rel := o.Release
		if rel == "" {
			rel = "before 0.2.0"
		}
		fmt.Fprintf(&b, " %s (%s, release %s, layout %d, live until %s)", o.ID, o.HTTPURL, rel, o.Layout, o.ExpiresAt.UTC().Format(time.RFC3339))
	}
	b.WriteString("; stop or upgrade them first (a rolling upgrade across a layout migration stops the old brokers before starting new ones), then start this release again")
	return b.String()
}

func versionList(vs []int) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = strconv.Itoa(v)
	}
	return strings.Join(parts, ", ")
}

// MigrateConfig configures MigrateWith.
type MigrateConfig struct {
	// URL is the database's (required).
	URL string
	// Logger receives the lines about waiting for the migration lock;
	// default slog.Default().
	Logger *slog.Logger
	// LockWaitLog is how long Migrate waits for the migration lock, held by
	// another session, before it logs that it is waiting (then again every
	// 30 s while it waits); default 1 s.
	LockWaitLog time.Duration

	// functions, when set, are the schema's functions (persistence/functions)
	// applied after the last migration unless the database records their
	// digest; tests that build older schemas leave them out.
	functions []schemaFunction
}

// Migrate is MigrateWith with only the URL.
func Migrate(ctx context.Context, url string) ([]int, error) {
	return MigrateWith(ctx, MigrateConfig{URL: url})
}

// MigrateWith applies the pending migrations to the database at cfg.URL,
// each in its own transaction, under a session advisory lock so that brokers
// (or `queen migrate` runs) starting together apply each migration exactly
// once (SPEC.md §2). It returns the versions it applied, in order (none when
// up to date).
//
// Then it (re)defines the schema's functions from persistence/functions when
// the database does not record their digest yet (applyFunctions).
//
// It refuses, before applying anything, a database holding a version this
// binary does not embed (*SchemaTooNewError). Before each layout migration
// it refuses, in that migration's transaction, while a live row of
// queen.brokers advertises an older layout (*LayoutBlockedError, with the
// versions applied before it). A database it cannot reach is
// queen.ErrUnavailable.
func MigrateWith(ctx context.Context, cfg MigrateConfig) ([]int, error) {
	cfg.functions = embeddedFunctions
	return migrate(ctx, cfg, embedded, math.MaxInt)
}

// migrateTo is Migrate up to version last (tests build older schemas).
func migrateTo(ctx context.Context, url string, last int) ([]int, error) {
	return migrate(ctx, MigrateConfig{URL: url}, embedded, last)
}

// migrate applies the migrations of all (in version order, the binary's own
// or a test's) up to version last. A version the database holds that all
// lacks is refused whatever last says.
func migrate(ctx context.Context, cfg MigrateConfig, all []Migration, last int) ([]int, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.LockWaitLog <= 0 {
		cfg.LockWaitLog = time.Second
	}
	cc, err := pgx.ParseConfig(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("persistence: bad database URL: %w", err)
	}
	if cc.RuntimeParams["application_name"] == "" {
		cc.RuntimeParams["application_name"] = "queen-migrate"
	}
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return nil, unavailable(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := lockMigrations(ctx, conn, cfg); err != nil {
		return nil, err
	}
	defer conn.Exec(context.WithoutCancel(ctx), sqlMigrateUnlock) //nolint:errcheck // released with the session anyway
	if _, err := conn.Exec(ctx, sqlMigratePrepare); err != nil {
		return nil, fmt.Errorf("persistence: prepare migrations: %w", err)
	}
	rows, err := conn.Query(ctx, sqlMigrateApplied)
	if err != nil {
		return nil, unavailable(err)
	}
	done, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, unavailable(err)
	}
	known := make(map[int]bool, len(all))
	for _, m := range all {
		known[m.Version] = true
	}
	applied := map[int]bool{}
	var unknown []int
	for _, v := range done {
		applied[int(v)] = true
		if !known[int(v)] {
			unknown = append(unknown, int(v))
		}
	}
	if len(unknown) > 0 {
		return nil, &SchemaTooNewError{Database: int(done[len(done)-1]), Binary: all[len(all)-1].Version, Unknown: unknown}
	}
	var ran []int
	for _, m := range all {
		if applied[m.Version] || m.Version > last {
			continue
		}
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if m.Layout > 0 {
				if err := checkLayout(ctx, tx, m); err != nil {
					return err
				}
			}
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, sqlMigrateRecord, m.Version, m.Name)
			return err
		})
		if err != nil {
			var blocked *LayoutBlockedError
			if errors.As(err, &blocked) {
				return ran, err
			}
			return ran, fmt.Errorf("persistence: migration %04d_%s: %w", m.Version, m.Name, err)
		}
		ran = append(ran, m.Version)
	}
	if cfg.functions != nil {
		if _, err := applyFunctions(ctx, conn, cfg.functions, functionsDigest, all[len(all)-1].Version); err != nil {
			return ran, err
		}
	}
	return ran, nil
}

// checkLayout refuses layout migration m while a live broker advertises an
// older layout. It locks queen.brokers until the migration commits, so no
// heartbeat registers a broker between the check and the new layout (the
// migrating process itself has not registered yet).
func checkLayout(ctx context.Context, tx pgx.Tx, m Migration) error {
	if _, err := tx.Exec(ctx, sqlMigrateBrokersLock); err != nil {
		return err
	}
	rows, err := tx.Query(ctx, sqlMigrateOlderBrokers, m.Layout)
	if err != nil {
		return err
	}
	older, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (OlderBroker, error) {
		var o OlderBroker
		var layout int32
		err := r.Scan(&o.ID, &o.HTTPURL, &layout, &o.Release, &o.ExpiresAt)
		o.Layout = int(layout)
		return o, err
	})
	if err != nil {
		return err
	}
	if len(older) > 0 {
		return &LayoutBlockedError{Version: m.Version, Name: m.Name, Layout: m.Layout, Brokers: older}
	}
	return nil
}

// lockMigrations takes the migration lock on conn, waiting for the session
// that holds it; past cfg.LockWaitLog of waiting it logs that it waits (and
// every 30 s after), naming the holder when PostgreSQL shows it.
func lockMigrations(ctx context.Context, conn *pgx.Conn, cfg MigrateConfig) error {
	var got bool
	if err := conn.QueryRow(ctx, sqlMigrateTryLock).Scan(&got); err != nil {
		return fmt.Errorf("persistence: migration lock: %w", unavailable(err))
	}
	if got {
		return nil
	}
	holder := []any{}
	var pid int32
	var app, client string
	var since time.Time
	if err := conn.QueryRow(ctx, sqlMigrateLockHolder).Scan(&pid, &app, &client, &since); err == nil {
		holder = []any{"holder_pid", pid, "holder_application", app, "holder_client", client, "holder_connected_at", since}
	}
	start := time.Now()
	stop, exited := make(chan struct{}), make(chan struct{})
	var logged atomic.Bool
	go func() {
		defer close(exited)
		t := time.NewTimer(cfg.LockWaitLog)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				logged.Store(true)
				cfg.Logger.Info("waiting for the migration lock, held by another session (a broker or `queen migrate` applying migrations)",
					append([]any{"waited", time.Since(start).Round(time.Millisecond)}, holder...)...)
				t.Reset(30 * time.Second)
			}
		}
	}()
	_, err := conn.Exec(ctx, sqlMigrateLock)
	close(stop)
	<-exited
	if err != nil {
		return fmt.Errorf("persistence: migration lock: %w", unavailable(err))
	}
	if logged.Load() {
		cfg.Logger.Info("migration lock taken", "waited", time.Since(start).Round(time.Millisecond))
	}
	return nil
}
