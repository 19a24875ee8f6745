package broker

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"

	"github.com/queen-mq/queen-go/persistence/pgtest"
	"github.com/queen-mq/queen-go/transport/client"
)

// TestSIGTERMDuringLoadLosesNothing runs the real binary (`queen serve`),
// pushes from several producers over NATS, sends SIGTERM mid-load, and checks
// that the process exits 0 and every item answered queued is stored once.
func TestSIGTERMDuringLoadLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "queen")
	build := exec.Command("go", "build", "-o", bin, "github.com/queen-mq/queen-go/cmd/queen")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	url := pgtest.NewDatabase(t)
	natsPort := freePort(t)
	cmd := exec.Command(bin, "serve", "--database-url", url, "--http-addr", "127.0.0.1:0",
		"--nats-listen", fmt.Sprintf("127.0.0.1:%d", natsPort), "--data-dir", dir)
	cmd.Env = append(os.Environ(), "QUEEN_LOG_LEVEL=info")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() }) //nolint:errcheck
	ready := make(chan struct{})
	var logMu sync.Mutex
	var logs strings.Builder
	go func() {
		sc := bufio.NewScanner(stderr)
		once := sync.Once{}
		for sc.Scan() {
			logMu.Lock()
			logs.WriteString(sc.Text() + "\n")
			logMu.Unlock()
			if strings.Contains(sc.Text(), "broker ready") {
				once.Do(func() { close(ready) })
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(60 * time.Second):
		logMu.Lock()
		defer logMu.Unlock()
		t.Fatalf("broker not ready:\n%s", logs.String())
	}

	nc, err := nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", natsPort), nats.MaxReconnects(0))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c := client.NewNATS(nc)

	var mu sync.Mutex
	queued := map[string]bool{}
	answered := 0
	signalled := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	for p := 0; p < 4; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			for i := 0; i < 100000; i++ {
				var batch []client.PushItem
				for k := 0; k < 5; k++ {
					batch = append(batch, client.PushItem{Queue: "sigterm", Partition: fmt.Sprintf("p%d", k), TransactionID: fmt.Sprintf("%d-%d-%d", p, i, k), Payload: json.RawMessage(`{}`)})
				}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				rs, err := c.Push(ctx, batch)
				cancel()
				if err != nil {
					return // the broker has stopped taking requests
				}
				mu.Lock()
				for _, r := range rs {
					if r.Status == "queued" {
						queued[r.TransactionID] = true
					}
				}
				answered++
				if answered == 50 {
					once.Do(func() { close(signalled) })
				}
				mu.Unlock()
			}
		}(p)
	}
	select {
	case <-signalled:
	case <-time.After(60 * time.Second):
		t.Fatal("no load answered")
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	waitErr := make(chan error, 1)
	go func() { waitErr <- cmd.Wait() }()
	select {
	case err := <-waitErr:
		if err != nil {
			logMu.Lock()
			defer logMu.Unlock()
			t.Fatalf("queen serve exited with %v after SIGTERM:\n%s", err, logs.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("queen serve did not exit after SIGTERM")
	}

	db, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	counts := txnCounts(dbFrames(t, db, "sigterm", ""))
	mu.Lock()
	defer mu.Unlock()
	if len(queued) < 250 {
		t.Fatalf("only %d items answered queued before the stop", len(queued))
	}
	for txn := range queued {
		if counts[txn] != 1 {
			t.Errorf("transactionId %s answered queued is stored %d times", txn, counts[txn])
		}
	}
	for txn, n := range counts {
		if n != 1 {
			t.Errorf("transactionId %s stored %d times", txn, n)
		}
	}
	t.Logf("%d items answered queued, %d stored", len(queued), len(counts))
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
