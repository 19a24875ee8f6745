package localpg

import (
	"fmt"
	"os"
	"testing"
)

// TestMain runs the package's tests, then removes rootBase when the tests
// left it empty: they remove the cluster areas they made under it (start's
// cleanup), and the folder itself must not stay behind either (issue 29).
// It fails the run when an empty rootBase remains. A rootBase holding an
// area (another cluster's) is left alone.
func TestMain(m *testing.M) {
	code := m.Run()
	if err := removeIfEmpty(rootBase); err != nil {
		fmt.Fprintf(os.Stderr, "localpg tests: %v\n", err)
		code = 1
	}
	if ents, err := os.ReadDir(rootBase); err == nil && len(ents) == 0 {
		fmt.Fprintf(os.Stderr, "localpg tests: an empty %s is left behind\n", rootBase)
		code = 1
	}
	os.Exit(code)
}

// removeIfEmpty removes dir when it exists and holds nothing.
func removeIfEmpty(dir string) error {
	ents, err := os.ReadDir(dir)
	if os.IsNotExist(err) || (err == nil && len(ents) > 0) {
		return nil
	}
	if err != nil {
		return err
	}
	return os.Remove(dir)
}
