package shards

import (
	"context"
	"encoding/json"
	"net"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/transport/wire"
)

// restartableNATS is an in-process NATS server that can be stopped and
// started again on the same loopback port (a NATS outage and its end).
type restartableNATS struct {
	t    *testing.T
	port int
	srv  *server.Server
}

func startRestartableNATS(t *testing.T) *restartableNATS {
	t.Helper()
	n := &restartableNATS{t: t, port: -1}
	n.start()
	n.port = n.srv.Addr().(*net.TCPAddr).Port
	t.Cleanup(func() { n.srv.Shutdown() })
	return n
}

func (n *restartableNATS) start() {
	n.t.Helper()
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: n.port, NoSigs: true, NoLog: true})
	require.NoError(n.t, err)
	srv.Start()
	require.True(n.t, srv.ReadyForConnections(10*time.Second))
	n.srv = srv
}

func (n *restartableNATS) stop() {
	n.srv.Shutdown()
	n.srv.WaitForShutdown()
}

// TestHopPastItsDeadlineIsNotExecutedAfterNATSReturns: through a NATS
// outage (the only server stopped, then started again on its port) a hop
// is never executed after its deadline. While the connection is down the
// router sends nothing and answers the items of another broker's shard
// nats_unavailable at once; a hop that was in nats.go's reconnect buffer
// anyway (sent as the connection broke) reaches the shard server when NATS
// returns and is dropped, answered timeout, because its deadline passed; a
// hop without a deadline (an older broker's) in the same buffer is
// executed then, which is what the deadline prevents. After the outage the
// router delivers to the owner again.
func TestHopPastItsDeadlineIsNotExecutedAfterNATSReturns(t *testing.T) {
	ns := startRestartableNATS(t)
	// One connection for the owner's subscription and the router: nats.go
	// sends a connection's subscriptions again before its reconnect buffer,
	// so the buffered hops find the shard served when NATS returns.
	nc, err := nats.Connect(ns.srv.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(10*time.Millisecond), nats.ReconnectJitter(0, 0))
	require.NoError(t, err)
	t.Cleanup(nc.Close)

	owner := &recorder{got: map[string][]string{}}
	s := newServer(t, ServerConfig{Conn: nc, Pusher: owner, Count: 1})
	require.NoError(t, s.ServeAll())
	defer s.Stop(context.Background()) //nolint:errcheck
	local := &recorder{got: map[string][]string{}}
	r := newRouter(t, RouterConfig{Conn: nc, Count: 1, Owners: owners(testOwner), Local: local, HopTimeout: 10 * time.Second})
	item := func(txn string) *queen.Item {
		return &queen.Item{Queue: "q", Partition: "p", TransactionID: txn, Payload: []byte(`{}`)}
	}

	// Before the outage: the hop carries its deadline, the earlier of the
	// caller's and the hop timeout's, and the owner stores the item.
	spy, err := nc.SubscribeSync(wire.ShardSubjectPrefix + ".>")
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sent := time.Now()
	res := r.Push(ctx, []*queen.Item{item("before")})
	require.Equal(t, queen.Queued, res[0].Verdict, "%+v", res[0].Err)
	seen, err := spy.NextMsg(10 * time.Second)
	require.NoError(t, err)
	dl, err := strconv.ParseInt(seen.Header.Get(wire.HeaderDeadline), 10, 64)
	require.NoError(t, err, "the hop carries %s", wire.HeaderDeadline)
	require.WithinRange(t, time.Unix(0, dl), sent.Add(10*time.Second), time.Now().Add(10*time.Second), "the hop timeout's deadline")
	require.NoError(t, spy.Unsubscribe())

	// The outage: nothing is sent, the items fail at once, retryable.
	ns.stop()
	require.Eventually(t, func() bool { return !nc.IsConnected() }, 10*time.Second, time.Millisecond)
	res = r.Push(ctx, []*queen.Item{item("during")})
	require.Equal(t, queen.Failed, res[0].Verdict)
	require.Equal(t, queen.ErrNATSUnavailable.Code, res[0].Err.Code, "%+v", res[0].Err)
	require.True(t, res[0].Err.Retryable)
	require.Equal(t, 503, res[0].Err.Status)
	require.NoError(t, ctx.Err(), "answered at once, not at a deadline")
	require.EqualValues(t, 1, r.Stats().Unreachable)

	// Hops already in the reconnect buffer: one whose deadline passes
	// during the outage, one without a deadline.
	replies := make(chan *nats.Msg, 4)
	inbox := nats.NewInbox()
	_, err = nc.ChanSubscribe(inbox, replies)
	require.NoError(t, err)
	hopCtx, hopCancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer hopCancel()
	late := hopMsg(hopCtx, wire.ShardPushSubject(0), encodeItems(nil, []*queen.Item{item("late")}))
	late.Reply = inbox
	require.NoError(t, nc.PublishMsg(late), "kept in the reconnect buffer")
	old := hopMsg(context.Background(), wire.ShardPushSubject(0), encodeItems(nil, []*queen.Item{item("no-deadline")}))
	old.Reply = inbox
	require.Empty(t, old.Header.Get(wire.HeaderDeadline))
	require.NoError(t, nc.PublishMsg(old))
	<-hopCtx.Done() // the first hop's sender gives up

	// NATS returns: the buffer is delivered, the late hop is not executed.
	ns.start()
	require.Eventually(t, func() bool { return nc.IsConnected() }, 10*time.Second, time.Millisecond)
	got := map[string]*nats.Msg{}
	for range 2 {
		select {
		case m := <-replies:
			if m.Header.Get(ErrorCodeHeader) != "" {
				got["late"] = m
			} else {
				require.Nil(t, got["old"], "both buffered hops were executed, the late one too")
				got["old"] = m
			}
		case <-ctx.Done():
			t.Fatalf("the buffered hops were not answered after NATS returned: %v", got)
		}
	}
	require.Equal(t, "504", got["late"].Header.Get(ErrorCodeHeader))
	var e queen.Error
	require.NoError(t, json.Unmarshal(got["late"].Data, &e))
	require.Equal(t, queen.ErrTimeout.Code, e.Code, "%s", got["late"].Data)
	rs, err := decodeResults(got["old"].Data)
	require.NoError(t, err)
	require.Equal(t, queen.Queued, rs[0].Verdict)
	require.EqualValues(t, 1, s.Expired())

	// After the outage the router reaches the owner again.
	res = r.Push(ctx, []*queen.Item{item("after")})
	require.Equal(t, queen.Queued, res[0].Verdict, "%+v", res[0].Err)
	owner.mu.Lock()
	stored := slices.Clone(owner.got["q/p"])
	owner.mu.Unlock()
	require.Equal(t, []string{"before", "no-deadline", "after"}, stored, "the late hop never reached a partition")
	require.Empty(t, local.got, "nothing was served here instead")
}

// TestShardServerRefusesAMalformedDeadline: a wire.HeaderDeadline that is
// not Unix nanoseconds is refused 400 invalid_field, nothing stored; a
// deadline in the future is executed, one in the past is answered timeout.
func TestShardServerRefusesAMalformedDeadline(t *testing.T) {
	nc := connectNATS(t, 0)
	rec := &recorder{got: map[string][]string{}}
	s := newServer(t, ServerConfig{Conn: nc, Pusher: rec, Count: 1})
	require.NoError(t, s.ServeAll())
	defer s.Stop(context.Background()) //nolint:errcheck
	send := func(deadline, txn string) *nats.Msg {
		t.Helper()
		m := nats.NewMsg(wire.ShardPushSubject(0))
		m.Header.Set(wire.HeaderDeadline, deadline)
		m.Data = encodeItems(nil, []*queen.Item{{Queue: "q", Partition: "p", TransactionID: txn, Payload: []byte(`{}`)}})
		reply, err := nc.RequestMsg(m, 10*time.Second)
		require.NoError(t, err)
		return reply
	}
	reply := send("soon", "bad")
	require.Equal(t, "400", reply.Header.Get(ErrorCodeHeader))
	require.Contains(t, string(reply.Data), `"code":"invalid_field"`)
	reply = send(strconv.FormatInt(time.Now().Add(-time.Second).UnixNano(), 10), "past")
	require.Equal(t, "504", reply.Header.Get(ErrorCodeHeader))
	require.Contains(t, string(reply.Data), "after its deadline")
	reply = send(strconv.FormatInt(time.Now().Add(time.Minute).UnixNano(), 10), "future")
	require.Empty(t, reply.Header.Get(ErrorCodeHeader), "%s", reply.Data)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Equal(t, []string{"future"}, rec.got["q/p"])
	require.EqualValues(t, 1, s.Expired())
}
