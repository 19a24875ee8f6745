package queen_test

import (
	"bytes"
	"maps"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/queen-mq/queen-go"

// importRule is one boundary of the package graph (README, Architecture): no
// package of from may depend, directly or through others, on a package
// matched by any of forbidden (an import path, or a prefix ending in "/").
type importRule struct {
	name      string
	from      []string
	forbidden []string
}

// importRules are the boundaries the README and DESIGN.md state, written
// down once so a broken one fails here instead of drifting in prose.
var importRules = []importRule{
	{
		name: "consume, actors and shards drive the store through interfaces they own, in the kernel's types, " +
			"so they compile without pgx (DESIGN.md: actors/ must not import pgx types); so does the " +
			"in-memory store the store suite also runs against (internal/storetest)",
		from:      []string{"consume", "actors", "shards", "internal/storetest"},
		forbidden: []string{"github.com/jackc/pgx/"},
	},
	{
		name: "the Go client imports no broker package and no pgx: it meets the front door only in the leaves " +
			"(the kernel, transport/wire)",
		from: []string{"transport/client"},
		forbidden: []string{module + "/actors", module + "/shards", module + "/persistence", module + "/consume",
			"github.com/jackc/pgx/"},
	},
	{
		name:      "persistence never imports transport (dependencies point down: persistence is the bottom floor)",
		from:      []string{"persistence"},
		forbidden: []string{module + "/transport", module + "/transport/"},
	},
}

// TestImportBoundaries checks importRules against the graph go list -deps
// prints, and names the rule and the import chain of each break.
func TestImportBoundaries(t *testing.T) {
	t.Parallel()
	gotool := goTool(t)
	for _, r := range importRules {
		for _, from := range r.from {
			root := module + "/" + from
			graph := importGraph(t, gotool, root)
			// Group the breaks by the path to the package that imports the
			// forbidden ones: pgx reached through persistence is one break.
			breaks := map[string][]string{}
			for pkg := range graph {
				if !matches(pkg, r.forbidden) {
					continue
				}
				chain := importChain(graph, root, pkg)
				for i, p := range chain {
					if matches(p, r.forbidden) {
						chain = chain[:i+1]
						break
					}
				}
				via := strings.Join(chain[:len(chain)-1], " → ")
				if !slices.Contains(breaks[via], chain[len(chain)-1]) {
					breaks[via] = append(breaks[via], chain[len(chain)-1])
				}
			}
			for _, via := range slices.Sorted(maps.Keys(breaks)) {
				slices.Sort(breaks[via])
				t.Errorf("%s → %s: broken rule: %s", strings.ReplaceAll(via, module+"/", ""),
					strings.ReplaceAll(strings.Join(breaks[via], ", "), module+"/", ""), r.name)
			}
		}
	}
}

// goTool is the go command: the one on PATH, else the one of the toolchain
// that built the test; the test is skipped without either.
func goTool(t *testing.T) string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	p := filepath.Join(runtime.GOROOT(), "bin", "go") //nolint:staticcheck // SA1019: a fallback only; the test binary is built and run on one machine
	if _, err := exec.LookPath(p); err != nil {
		t.Skip("no go tool on PATH or in GOROOT: the import boundaries are not checked")
	}
	return p
}

// importGraph returns pkg's dependencies (pkg included), each with its
// direct imports, from go list -deps.
func importGraph(t *testing.T, gotool, pkg string) map[string][]string {
	cmd := exec.Command(gotool, "list", "-deps", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", pkg)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "go list -deps %s: %s", pkg, stderr.String())
	graph := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) > 0 {
			graph[f[0]] = f[1:]
		}
	}
	require.Contains(t, graph, pkg)
	return graph
}

// matches reports whether pkg is one of forbidden or under one ending in "/".
func matches(pkg string, forbidden []string) bool {
	for _, f := range forbidden {
		if pkg == f || (strings.HasSuffix(f, "/") && strings.HasPrefix(pkg, f)) {
			return true
		}
	}
	return false
}

// importChain is a shortest import path from root to pkg in graph.
func importChain(graph map[string][]string, root, pkg string) []string {
	prev := map[string]string{root: ""}
	queue := []string{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p == pkg {
			var chain []string
			for ; p != ""; p = prev[p] {
				chain = append([]string{p}, chain...)
			}
			return chain
		}
		for _, imp := range graph[p] {
			if _, seen := prev[imp]; !seen {
				prev[imp] = p
				queue = append(queue, imp)
			}
		}
	}
	return []string{root, "?", pkg}
}
