package persistence

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

var (
	sqlRawSchema = q("raw_schema")
	sqlRawCreate = q("raw_create")
	sqlRawDrop   = q("raw_drop")
	sqlRawCount  = q("raw_count")
)

// RawSchema is the schema of the raw baseline tables.
const RawSchema = "queen_raw"

// rawColumns are the columns CopyMessages fills (created_at takes its
// default, clock_timestamp()).
var rawColumns = []string{"id", "queue", "partition", "transaction_id", "payload"}

var rawTableName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// RawMessage is one row of a raw baseline table.
type RawMessage struct {
	ID            uuid.UUID
	Queue         string
	Partition     string
	TransactionID string
	// Payload is raw JSON (stored as jsonb).
	Payload []byte
}

// RawWriter writes messages straight into plain PostgreSQL tables with COPY,
// one row per message, no broker and no dedup: the baseline `queen loadtest
// --mode raw` compares the broker against. It is safe for concurrent use.
type RawWriter struct {
	pool *pgxpool.Pool
}

// OpenRaw connects a pool (up to 32 connections, like the broker's Store) to
// url.
func OpenRaw(ctx context.Context, url string) (*RawWriter, error) {
	pool, err := openPool(ctx, url, 32, nil, nil)
	if err != nil {
		return nil, err
	}
	return &RawWriter{pool: pool}, nil
}

// Close closes the pool.
func (w *RawWriter) Close() { w.pool.Close() }

// rawTable returns the sanitized, schema-qualified name of table, which must
// be a lower-case SQL identifier (letters, digits, underscores; at most 63).
func rawTable(table string) (string, error) {
	if !rawTableName.MatchString(table) {
		return "", fmt.Errorf("persistence: bad raw table name %q (want [a-z_][a-z0-9_]*, at most 63)", table)
	}
	return pgx.Identifier{RawSchema, table}.Sanitize(), nil
}

func withTable(sql, ident string) string { return strings.ReplaceAll(sql, "{{table}}", ident) }

// Reset creates a fresh, empty table queen_raw.<table> (dropping any table of
// that name first): id uuid primary key, queue, partition, transaction_id,
// payload jsonb, created_at timestamptz default clock_timestamp().
func (w *RawWriter) Reset(ctx context.Context, table string) error {
	ident, err := rawTable(table)
	if err != nil {
		return err
	}
	b := &pgx.Batch{}
	b.Queue(sqlRawSchema)
	b.Queue(withTable(sqlRawDrop, ident))
	b.Queue(withTable(sqlRawCreate, ident))
	if err := w.pool.SendBatch(ctx, b).Close(); err != nil {
		return unavailable(err)
	}
	return nil
}

// Drop removes queen_raw.<table> if it exists.
func (w *RawWriter) Drop(ctx context.Context, table string) error {
	ident, err := rawTable(table)
	if err != nil {
		return err
	}
	if _, err := w.pool.Exec(ctx, withTable(sqlRawDrop, ident)); err != nil {
		return unavailable(err)
	}
	return nil
}

// CopyMessages writes rows into queen_raw.<table> with one COPY (pgx
// CopyFrom, one autocommitted statement) and returns how many rows were
// written.
func (w *RawWriter) CopyMessages(ctx context.Context, table string, rows []RawMessage) (int64, error) {
	if _, err := rawTable(table); err != nil {
		return 0, err
	}
	n, err := w.pool.CopyFrom(ctx, pgx.Identifier{RawSchema, table}, rawColumns, pgx.CopyFromSlice(len(rows), func(i int) ([]any, error) {
		r := &rows[i]
		return []any{[16]byte(r.ID), r.Queue, r.Partition, r.TransactionID, r.Payload}, nil
	}))
	if err != nil {
		return n, unavailable(err)
	}
	return n, nil
}

// Count returns the rows in queen_raw.<table>.
func (w *RawWriter) Count(ctx context.Context, table string) (int64, error) {
	ident, err := rawTable(table)
	if err != nil {
		return 0, err
	}
	var n int64
	if err := w.pool.QueryRow(ctx, withTable(sqlRawCount, ident)).Scan(&n); err != nil {
		return 0, unavailable(err)
	}
	return n, nil
}
