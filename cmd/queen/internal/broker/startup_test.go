package broker

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/queen-mq/queen-go/persistence/pgtest"
)

// TestNATSReadyWhenStartReturns: Start "returns once it serves HTTP and
// NATS", so the very first request after it returns is answered (no "no
// responders"). Brokers are started one after another on one database and
// one external NATS server, and a client that is already connected pushes
// the moment Start returns.
func TestNATSReadyWhenStartReturns(t *testing.T) {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true, MaxPayload: 16<<20 + 64<<10})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("NATS server not ready")
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	url := pgtest.NewDatabase(t)

	const starts = 15
	noResponders := 0
	for i := 0; i < starts; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		b, err := Start(ctx, Config{DatabaseURL: url, HTTPAddr: "127.0.0.1:0", NATSURL: srv.ClientURL(), DataDir: t.TempDir(), Logger: quietLogger()})
		cancel()
		if err != nil {
			t.Fatalf("start %d: %v", i, err)
		}
		e := &env{b: b, nc: nc, hc: &http.Client{}, base: b.HTTPURL()}
		for _, via := range []string{"nats", "http"} {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			r, err := e.tryPush(ctx, via, items(it("ready", "", "")))
			cancel()
			switch {
			case errors.Is(err, nats.ErrNoResponders):
				noResponders++
				t.Errorf("start %d: the first %s push right after Start got %v", i, via, err)
			case err != nil:
				t.Errorf("start %d: first %s push: %v", i, via, err)
			case r.Status != http.StatusCreated:
				t.Errorf("start %d: first %s push: status %d %s", i, via, r.Status, clip(r.Raw))
			}
		}
		e.hc.CloseIdleConnections()
		ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
		if err := b.Stop(ctx); err != nil {
			t.Errorf("stop %d: %v", i, err)
		}
		cancel()
	}
	if noResponders > 0 {
		t.Logf("%d of %d first NATS pushes found no responders", noResponders, starts)
	}
}
