package main

import (
	"os"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"
)

// TestDocsStayInTheRepository (issue 29, item 6): no --help text of any
// verb and no line of the README cites SPEC.md, a file outside the
// repository; what a user needs is in the README and docs/contract.md,
// which the help texts cite instead.
func TestDocsStayInTheRepository(t *testing.T) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, text := range []string{c.Short, c.Long, c.Example} {
			require.NotContains(t, text, "SPEC", "queen %s --help", c.CommandPath())
		}
		require.NotContains(t, c.Flags().FlagUsages(), "SPEC", "queen %s --help's flags", c.CommandPath())
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	for _, c := range []*cobra.Command{serveCmd(), migrateCmd(), pushCmd(), loadtestCmd(),
		queuesCmd(), tailCmd(), dedupCmd(), dlqCmd(), clusterCmd(), whoamiCmd(), natsNodeCmd()} {
		walk(c)
	}
	for _, doc := range []string{"../../README.md", "../../docs/contract.md"} {
		b, err := os.ReadFile(doc)
		require.NoError(t, err)
		for i, line := range strings.Split(string(b), "\n") {
			require.NotContains(t, line, "SPEC", "%s:%d", doc, i+1)
		}
	}
}
