package pgtest

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

var templateCalls atomic.Int32

func TestMain(m *testing.M) {
	SetTemplate(func(ctx context.Context, url string) error {
		templateCalls.Add(1)
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		_, err = conn.Exec(ctx, "CREATE TABLE tmpl_marker (v text); INSERT INTO tmpl_marker VALUES ('from template')")
		return err
	})
	Main(m)
}

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func queryString(t *testing.T, conn *pgx.Conn, sql string, args ...any) string {
	t.Helper()
	var s string
	if err := conn.QueryRow(context.Background(), sql, args...).Scan(&s); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return s
}

func TestIsolatedDatabases(t *testing.T) {
	t.Parallel()
	urlA, urlB := NewDatabase(t), NewDatabase(t)
	if urlA == urlB {
		t.Fatalf("same URL twice: %s", urlA)
	}
	a, b := connect(t, urlA), connect(t, urlB)
	nameA := queryString(t, a, "SELECT current_database()")
	nameB := queryString(t, b, "SELECT current_database()")
	if nameA == nameB || !strings.HasPrefix(nameA, "queen_test_") || !strings.HasPrefix(nameB, "queen_test_") {
		t.Fatalf("databases %q and %q", nameA, nameB)
	}
	if _, err := a.Exec(context.Background(), "CREATE TABLE only_a (v int); INSERT INTO tmpl_marker VALUES ('a')"); err != nil {
		t.Fatal(err)
	}
	if got := queryString(t, b, "SELECT coalesce(to_regclass('only_a')::text, 'absent')"); got != "absent" {
		t.Errorf("table of database A visible in B: %s", got)
	}
	if got := queryString(t, b, "SELECT count(*)::text FROM tmpl_marker"); got != "1" {
		t.Errorf("B sees %s template rows, want 1 (A's insert leaked?)", got)
	}
	// The template was applied to both.
	for _, c := range []*pgx.Conn{a, b} {
		if got := queryString(t, c, "SELECT v FROM tmpl_marker ORDER BY v DESC LIMIT 1"); got != "from template" {
			t.Errorf("template row = %q", got)
		}
	}
}

func TestParallelDatabasesShareOneTemplate(t *testing.T) {
	t.Parallel()
	for i := 0; i < 8; i++ {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			t.Parallel()
			conn := connect(t, NewDatabase(t))
			if got := queryString(t, conn, "SELECT v FROM tmpl_marker"); got != "from template" {
				t.Errorf("template row = %q", got)
			}
			if _, err := conn.Exec(context.Background(), "INSERT INTO tmpl_marker VALUES ($1)", strconv.Itoa(i)); err != nil {
				t.Fatal(err)
			}
			if got := queryString(t, conn, "SELECT count(*)::text FROM tmpl_marker"); got != "2" {
				t.Errorf("%s rows, want 2", got)
			}
		})
	}
	t.Cleanup(func() {
		if n := templateCalls.Load(); n != 1 {
			t.Errorf("template function ran %d times, want 1", n)
		}
	})
}

func TestWithoutTemplate(t *testing.T) {
	t.Parallel()
	conn := connect(t, newDatabase(t, ""))
	if got := queryString(t, conn, "SELECT coalesce(to_regclass('tmpl_marker')::text, 'absent')"); got != "absent" {
		t.Errorf("database without template has tmpl_marker")
	}
	if got := queryString(t, conn, "SELECT count(*)::text FROM pg_class WHERE relnamespace = 'public'::regnamespace"); got != "0" {
		t.Errorf("fresh database has %s relations in public", got)
	}
}

// The database is dropped after the test, even with a session still open.
func TestDroppedOnCleanup(t *testing.T) {
	t.Parallel()
	var name string
	var leftOpen *pgx.Conn
	t.Run("inner", func(t *testing.T) {
		url := NewDatabase(t)
		conn, err := pgx.Connect(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		leftOpen = conn // not closed before the drop: WITH (FORCE)
		name = queryString(t, conn, "SELECT current_database()")
	})
	if leftOpen != nil {
		defer leftOpen.Close(context.Background())
	}
	admin := connect(t, ServerURL())
	if got := queryString(t, admin, "SELECT count(*)::text FROM pg_database WHERE datname = $1", name); got != "0" {
		t.Errorf("database %s still exists after its test", name)
	}
}

func TestDatabaseURL(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://u:p@127.0.0.1:5432/queen?sslmode=disable": "postgres://u:p@127.0.0.1:5432/x?sslmode=disable",
		"postgresql://h/":                       "postgresql://h/x",
		"host=127.0.0.1 port=5432 dbname=queen": "host=127.0.0.1 port=5432 dbname=queen dbname=x",
	} {
		got, err := databaseURL(in, "x")
		if err != nil || got != want {
			t.Errorf("databaseURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	// pgx takes the last dbname of a key=value string.
	cfg, err := pgx.ParseConfig("host=127.0.0.1 dbname=queen dbname=x")
	if err != nil || cfg.Database != "x" {
		t.Errorf("key=value override: %v %v", cfg, err)
	}
}
