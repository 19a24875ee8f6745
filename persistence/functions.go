package persistence

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"regexp"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"
)

//go:embed functions/*.sql
var functionsFS embed.FS

var (
	sqlFunctionsDigest = q("functions_digest")
	sqlFunctionsRecord = q("functions_record")
)

// schemaFunction is one function of the queen schema: functions/NAME.sql,
// a single CREATE OR REPLACE FUNCTION queen.NAME statement with its comment.
type schemaFunction struct {
	Name string
	SQL  string
}

// The schema's functions, in file name order, and their digest, read once.
var embeddedFunctions, functionsDigest = mustReadFunctions()

var functionHead = regexp.MustCompile(`(?m)^CREATE OR REPLACE FUNCTION queen\.(\w+)\(`)

// readFunctions reads functions/*.sql. Each file must define exactly one
// function, named as the file, with CREATE OR REPLACE: a function's body lives
// in its file and nowhere else from migration 0016 on (issue 42; the
// migrations before it keep the definitions they applied, as history).
func readFunctions() ([]schemaFunction, string, error) {
	entries, err := functionsFS.ReadDir("functions")
	if err != nil {
		return nil, "", err
	}
	var out []schemaFunction
	h := sha256.New()
	for _, e := range entries {
		name := strings.TrimSuffix(e.Name(), ".sql")
		b, err := functionsFS.ReadFile(path.Join("functions", e.Name()))
		if err != nil {
			return nil, "", err
		}
		heads := functionHead.FindAllStringSubmatch(string(b), -1)
		if len(heads) != 1 || heads[0][1] != name || strings.Contains(string(b), "CREATE FUNCTION") {
			return nil, "", fmt.Errorf("persistence: functions/%s must hold one CREATE OR REPLACE FUNCTION queen.%s", e.Name(), name)
		}
		out = append(out, schemaFunction{Name: name, SQL: string(b)})
		fmt.Fprintf(h, "%s\x00%d\x00%s", name, len(b), b)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, hex.EncodeToString(h.Sum(nil)), nil
}

func mustReadFunctions() ([]schemaFunction, string) {
	fns, digest, err := readFunctions()
	if err != nil {
		panic(err)
	}
	return fns, digest
}

// applyFunctions (re)defines fns on the database behind conn, in one
// transaction, unless queen.schema_functions already records digest (then
// nothing is redefined, so the plans of running brokers stay valid). The
// caller holds the migration lock and has applied every migration this
// binary embeds, so the schema is the one the bodies were written for; a
// binary whose schema version is older than the database's never gets here
// (SchemaTooNewError). Function bodies change with a new migration, or
// between releases of one schema version only where they return the same
// rows (0.6.9: sidecar_find reads less): then the broker that starts last
// applies its own, and either set answers alike.
func applyFunctions(ctx context.Context, conn *pgx.Conn, fns []schemaFunction, digest string, schema int) (applied bool, err error) {
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		var have string
		switch err := tx.QueryRow(ctx, sqlFunctionsDigest).Scan(&have); {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return err
		case have == digest:
			return nil
		}
		for _, f := range fns {
			if _, err := tx.Exec(ctx, f.SQL); err != nil {
				return fmt.Errorf("function queen.%s: %w", f.Name, err)
			}
		}
		if _, err := tx.Exec(ctx, sqlFunctionsRecord, digest, schema); err != nil {
			return err
		}
		applied = true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("persistence: apply the schema's functions: %w", err)
	}
	return applied, nil
}
