package localpg

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// ErrNoBinaries is wrapped by the errors FindBinDir and Start return when
// the PostgreSQL server binaries (initdb, pg_ctl, postgres) cannot be found.
var ErrNoBinaries = errors.New("localpg: PostgreSQL binaries not found")

// requiredBinaries are the programs a bin folder must hold to be usable.
var requiredBinaries = []string{"initdb", "pg_ctl", "postgres"}

// binariesError carries a precise message and unwraps to ErrNoBinaries.
type binariesError struct{ msg string }

func (e *binariesError) Error() string { return e.msg }
func (e *binariesError) Unwrap() error { return ErrNoBinaries }

// envBinDir is the environment variable that overrides where the
// PostgreSQL binaries are looked up.
const envBinDir = "QUEEN_PG_BIN"

// FindBinDir returns the folder holding initdb, pg_ctl and postgres.
//
// Resolution order: explicit (when not empty), else $QUEEN_PG_BIN (when
// set), else `pg_config --bindir`, else the highest-versioned
// /usr/lib/postgresql/*/bin. An explicit folder or $QUEEN_PG_BIN that lacks
// the binaries is an error: it never falls back to other places. The error
// wraps ErrNoBinaries and names the folders tried.
func FindBinDir(explicit string) (string, error) {
	if explicit != "" {
		return checkExplicit(explicit, "BinDir")
	}
	if env := os.Getenv(envBinDir); env != "" {
		return checkExplicit(env, envBinDir)
	}
	var tried []string
	seen := map[string]bool{}
	try := func(dir string) bool {
		if dir == "" {
			return false
		}
		dir = filepath.Clean(dir)
		if seen[dir] {
			return false
		}
		seen[dir] = true
		tried = append(tried, dir)
		return len(missingBinaries(dir)) == 0
	}
	if dir := pgConfigBinDir(); try(dir) {
		return dir, nil
	}
	for _, dir := range debianBinDirs() {
		if try(dir) {
			return dir, nil
		}
	}
	where := "no candidate folders"
	if len(tried) > 0 {
		where = "tried " + strings.Join(tried, ", ")
	}
	return "", &binariesError{msg: fmt.Sprintf(
		"localpg: PostgreSQL binaries not found (%s; set %s): need %s",
		where, envBinDir, strings.Join(requiredBinaries, ", "))}
}

func checkExplicit(dir, source string) (string, error) {
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	if len(missingBinaries(dir)) > 0 {
		return "", &binariesError{msg: fmt.Sprintf(
			"localpg: PostgreSQL binaries not found in %s (%s): need %s",
			dir, source, strings.Join(requiredBinaries, ", "))}
	}
	return dir, nil
}

// missingBinaries lists the required programs that are not executable
// regular files in dir.
func missingBinaries(dir string) []string {
	var missing []string
	for _, name := range requiredBinaries {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			missing = append(missing, name)
		}
	}
	return missing
}

// pgConfigBinDir asks `pg_config --bindir`; "" when pg_config is missing or
// fails.
func pgConfigBinDir() string {
	path, err := exec.LookPath("pg_config")
	if err != nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--bindir").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// debianBinDirs returns /usr/lib/postgresql/*/bin, highest version first.
func debianBinDirs() []string {
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.SliceStable(matches, func(i, j int) bool {
		return versionLess(versionOf(matches[j]), versionOf(matches[i]))
	})
	return matches
}

func versionOf(binDir string) []int {
	var v []int
	for _, part := range strings.Split(filepath.Base(filepath.Dir(binDir)), ".") {
		n, err := strconv.Atoi(part)
		if err != nil {
			n = -1
		}
		v = append(v, n)
	}
	return v
}

func versionLess(a, b []int) bool {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return len(a) < len(b)
}
