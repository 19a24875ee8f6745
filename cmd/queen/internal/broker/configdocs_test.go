package broker

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/queen-mq/queen-go/persistence"
	"github.com/queen-mq/queen-go/shards"
	"github.com/queen-mq/queen-go/transport"
)

// TestConfigDocsStateTheCodesDefaults: the defaults Config's field docs
// state are the code's (issue 39: SidecarRange's doc said 5m while the
// default was 1m).
func TestConfigDocsStateTheCodesDefaults(t *testing.T) {
	t.Parallel()
	docs := configFieldDocs(t)
	for field, want := range map[string]string{
		"SidecarRange":         "default persistence.DefaultSidecarRange, " + shortDuration(persistence.DefaultSidecarRange),
		"ShardLease":           "default " + shortDuration(shards.DefaultLease),
		"LockTimeout":          "default " + shortDuration(persistence.DefaultLockTimeout),
		"BodyIdleTimeout":      "default transport.DefaultBodyIdleTimeout, " + shortDuration(transport.DefaultBodyIdleTimeout),
		"MaxInFlightBodyBytes": fmt.Sprintf("default transport.DefaultMaxInFlightBodyBytes, %d MiB", transport.DefaultMaxInFlightBodyBytes>>20),
	} {
		require.Contains(t, docs[field], want, "the doc of Config.%s", field)
	}
}

// configFieldDocs reads broker.go's Config: each field's doc comment, its
// lines joined by single spaces.
func configFieldDocs(t *testing.T) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "broker.go", nil, parser.ParseComments)
	require.NoError(t, err)
	docs := map[string]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok || ts.Name.Name != "Config" {
			return true
		}
		for _, fld := range ts.Type.(*ast.StructType).Fields.List {
			for _, name := range fld.Names {
				docs[name.Name] = strings.Join(strings.Fields(fld.Doc.Text()), " ")
			}
		}
		return false
	})
	require.NotEmpty(t, docs, "no Config in broker.go")
	return docs
}

// shortDuration is d as the docs write it: 1m, not 1m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
