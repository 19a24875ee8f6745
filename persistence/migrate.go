package persistence

import (
	"context"
	"embed"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

//go:embed migrations/*.sql
var migrationsFS embed.FS

// Migration is one versioned schema change: migrations/NNNN_name.sql.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// Migrations returns the embedded migrations in version order.
func Migrations() ([]Migration, error) {
	entries, err := migrationsFS.ReadDir("migrations")
	if err != nil {
		return nil, err
	}
	var out []Migration
	for _, e := range entries {
		base := strings.TrimSuffix(e.Name(), ".sql")
		num, name, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			return nil, fmt.Errorf("persistence: bad migration file name %q", e.Name())
		}
		b, err := migrationsFS.ReadFile("migrations/" + e.Name())
		if err != nil {
			return nil, err
		}
		out = append(out, Migration{Version: v, Name: name, SQL: string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// Migrate applies the pending migrations to the database at url, each in its
// own transaction, under a session advisory lock so that brokers (or `queen
// migrate` runs) starting together apply each migration exactly once
// (SPEC.md §2). It returns the versions it applied (none when up to date).
func Migrate(ctx context.Context, url string) ([]int, error) {
	return migrateTo(ctx, url, math.MaxInt)
}

// migrateTo is Migrate up to version last (tests build older schemas).
func migrateTo(ctx context.Context, url string, last int) ([]int, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, unavailable(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, sqlMigrateLock); err != nil {
		return nil, fmt.Errorf("persistence: migration lock: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), sqlMigrateUnlock) //nolint:errcheck // released with the session anyway
	if _, err := conn.Exec(ctx, sqlMigratePrepare); err != nil {
		return nil, fmt.Errorf("persistence: prepare migrations: %w", err)
	}
	rows, err := conn.Query(ctx, sqlMigrateApplied)
	if err != nil {
		return nil, err
	}
	done, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, err
	}
	applied := map[int]bool{}
	for _, v := range done {
		applied[int(v)] = true
	}
	all, err := Migrations()
	if err != nil {
		return nil, err
	}
	var ran []int
	for _, m := range all {
		if applied[m.Version] || m.Version > last {
			continue
		}
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, sqlMigrateRecord, m.Version, m.Name)
			return err
		})
		if err != nil {
			return ran, fmt.Errorf("persistence: migration %04d_%s: %w", m.Version, m.Name, err)
		}
		ran = append(ran, m.Version)
	}
	return ran, nil
}
