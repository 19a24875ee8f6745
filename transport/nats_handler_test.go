package transport_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/stretchr/testify/require"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/transport"
	"github.com/queen-mq/queen-go/transport/natstest"
)

// natsFront starts an embedded NATS server and f's Service on it (SPEC.md
// §11), and returns a client connection.
func natsFront(t *testing.T, f transportBroker, token string) *nats.Conn {
	t.Helper()
	return serveNATS(t, transport.NewService(transport.Config{Pusher: f, Queues: f, Consumer: f, AdminToken: token}))
}

// serveNATS starts an embedded NATS server of its own with svc's NATS
// service on it, and returns a client connection.
func serveNATS(t *testing.T, svc *transport.Service) *nats.Conn {
	t.Helper()
	srv := natstest.StartCluster(t, 1, nil)[0]
	bc, err := nats.Connect(srv.ClientURL())
	require.NoError(t, err)
	t.Cleanup(bc.Close)
	ns, err := svc.NewNATS(transport.NATSConfig{Conn: bc, Version: "1.0.0"})
	require.NoError(t, err)
	require.NoError(t, ns.Start(context.Background()))
	t.Cleanup(func() { ns.Stop(context.Background()) }) //nolint:errcheck
	nc, err := nats.Connect(srv.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	return nc
}

// transportBroker is what natsFront needs of a fake.
type transportBroker interface {
	transport.Pusher
	transport.Queues
	transport.Consumer
}

// request sends body to subject and returns the reply's status (from the
// micro error header; 200 without one) and body.
func request(t *testing.T, nc *nats.Conn, subject, body string, header ...string) (int, []byte) {
	t.Helper()
	m := nats.NewMsg(subject)
	m.Data = []byte(body)
	for i := 0; i+1 < len(header); i += 2 {
		m.Header.Set(header[i], header[i+1])
	}
	rep, err := nc.RequestMsg(m, 20*time.Second)
	require.NoError(t, err)
	status := http.StatusOK
	if code := rep.Header.Get(micro.ErrorCodeHeader); code != "" {
		status, err = strconv.Atoi(code)
		require.NoError(t, err)
		require.NotEmpty(t, rep.Header.Get(micro.ErrorHeader), "an error carries its sentence")
	}
	return status, rep.Data
}

func TestNATSPush(t *testing.T) {
	f := newFake()
	nc := natsFront(t, f, "")
	status, body := request(t, nc, "queen.v1.push", `{"items":[{"queue":"q","transactionId":"t1"},{"queue":"q","partition":"p","transactionId":"t1"}]}`)
	require.Equal(t, http.StatusOK, status, "%s", body)
	var reply []map[string]any
	require.NoError(t, json.Unmarshal(body, &reply))
	require.Len(t, reply, 2)
	require.Equal(t, "queued", reply[1]["status"])
	require.Equal(t, "p", reply[1]["partition"])
	require.Equal(t, "Default", f.pushed[0][0].Partition)
	require.Equal(t, queen.HashTxn("t1"), f.pushed[0][1].Hash)

	status, body = request(t, nc, "queen.v1.push", `{"items":[]}`)
	require.Equal(t, http.StatusOK, status)
	require.JSONEq(t, `[]`, string(body))
	require.Len(t, f.pushed, 1)

	f.verdict = func(int, *queen.Item) queen.Result {
		return queen.FailedResult(uuid.Nil, queen.ErrOverloaded.With("busy"))
	}
	status, body = request(t, nc, "queen.v1.push", `{"items":[{"queue":"q"}]}`)
	require.Equal(t, http.StatusServiceUnavailable, status, "every item failed")
	require.NoError(t, json.Unmarshal(body, &reply))
	require.Equal(t, "failed", reply[0]["status"], "the per-item array, as over HTTP")
}

func TestNATSPushRefusalsWriteNothing(t *testing.T) {
	f := newFake()
	nc := natsFront(t, f, "")
	for _, r := range pushRefusals {
		t.Run(r.name, func(t *testing.T) {
			status, body := request(t, nc, "queen.v1.push", r.in)
			checkRefusal(t, r, status, body)
		})
	}
	require.Zero(t, f.calls())
}

func TestNATSPop(t *testing.T) {
	f := newFake()
	nc := natsFront(t, f, "")
	status, body := request(t, nc, "queen.v1.pop", `{"queue":"q","partition":"p","batch":4,"consumerGroup":"g","autoAck":true,"subscriptionMode":"new"}`)
	require.Equal(t, http.StatusOK, status)
	require.Empty(t, body, "nothing available: an empty reply")
	req := f.pops[0]
	require.Equal(t, queen.PopRequest{Queue: "q", Partition: "p", Batch: 4, ConsumerGroup: "g", AutoAck: true, SubscriptionNew: true, Partitions: 1, Timeout: req.Timeout}, req)

	lease := uuid.NewString()
	f.popRes = queen.PopResult{Messages: []queen.Message{{ID: uuid.NewString(), TransactionID: "t", Data: json.RawMessage(`1`), Offset: 3, LeaseID: &lease}}, LeaseID: &lease}
	status, body = request(t, nc, "queen.v1.pop", `{"queue":"q"}`)
	require.Equal(t, http.StatusOK, status)
	var got queen.PopResult
	require.NoError(t, json.Unmarshal(body, &got))
	require.Equal(t, lease, *got.LeaseID)
	require.Equal(t, int64(3), got.Messages[0].Offset)

	for _, r := range []badRequest{
		{"not JSON", `{`, 400, "invalid_json", "", -1},
		{"batch of the wrong type", `{"queue":"q","batch":"5"}`, 400, "", "batch", -1},
		{"no queue", `{"batch":1}`, 400, "missing_field", "queue", -1},
	} {
		t.Run(r.name, func(t *testing.T) {
			status, body := request(t, nc, "queen.v1.pop", r.in)
			checkRefusal(t, r, status, body)
		})
	}
	require.Len(t, f.pops, 2)
}

func TestNATSAckAndLease(t *testing.T) {
	f := newFake()
	nc := natsFront(t, f, "")
	pid, lease := uuid.New(), uuid.New()
	status, body := request(t, nc, "queen.v1.ack", `{"partitionId":"`+pid.String()+`","offset":2,"status":"dlq","consumerGroup":"g"}`)
	require.Equal(t, http.StatusOK, status, "%s", body)
	require.Equal(t, queen.AckDLQ, f.acks[0][0].Status)
	status, body = request(t, nc, "queen.v1.ack.batch", `{"acknowledgments":[{"partitionId":"`+pid.String()+`","offset":2}]}`)
	require.Equal(t, http.StatusOK, status, "%s", body)
	var res []queen.AckResult
	require.NoError(t, json.Unmarshal(body, &res))
	require.Equal(t, queen.Acked, res[0].Result)
	status, body = request(t, nc, "queen.v1.ack", `{"offset":2}`)
	checkRefusal(t, badRequest{"no partitionId", "", 400, "missing_field", "partitionId", -1}, status, body)
	require.Len(t, f.acks, 2)

	f.extendAt = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	status, body = request(t, nc, "queen.v1.lease.extend", `{"leaseId":"`+lease.String()+`","seconds":30}`)
	require.Equal(t, http.StatusOK, status, "%s", body)
	require.Equal(t, extendCall{lease, 30}, f.extended[0])
	status, body = request(t, nc, "queen.v1.lease.extend", `{"leaseId":"x"}`)
	checkRefusal(t, badRequest{"bad lease", "", 400, "invalid_field", "leaseId", -1}, status, body)
	f.extendErr = queen.ErrLeaseInvalid.With("not live")
	status, body = request(t, nc, "queen.v1.lease.extend", `{"leaseId":"`+lease.String()+`"}`)
	require.Equal(t, http.StatusConflict, status)
	require.Equal(t, "lease_invalid", decodeError(t, body).Code)
}

func TestNATSConfigureAndAdminToken(t *testing.T) {
	f := newFake()
	nc := natsFront(t, f, "s3cret")
	status, body := request(t, nc, "queen.v1.configure", `{"queue":"q","options":{"leaseTime":10}}`)
	require.Equal(t, http.StatusOK, status, "%s", body)
	require.Equal(t, int64(10), *f.configured[0].Options.LeaseTime)
	status, body = request(t, nc, "queen.v1.configure", `{"queue":"q","options":{"leasetime":10}}`)
	checkRefusal(t, badRequest{"misspelt option", "", 400, "", "options.leasetime", -1}, status, body)

	status, body = request(t, nc, "queen.v1.dedup", `{"queue":"q","transactionId":"t"}`)
	require.Equal(t, http.StatusUnauthorized, status, "an admin subject without the token")
	require.Equal(t, "unauthorized", decodeError(t, body).Code)
	status, body = request(t, nc, "queen.v1.dedup", `{"queue":"q","transactionId":"t"}`, "Authorization", "Bearer s3cret")
	require.NotEqual(t, http.StatusUnauthorized, status, "%s", body)
	status, _ = request(t, nc, "queen.v1.push", `{"items":[{"queue":"q"}]}`)
	require.Equal(t, http.StatusOK, status, "push never asks for the token")
}

// The micro monitoring subjects answer for the service (nats micro ls/info).
func TestNATSMicroInfo(t *testing.T) {
	nc := natsFront(t, newFake(), "")
	rep, err := nc.Request("$SRV.INFO.queen", nil, 20*time.Second)
	require.NoError(t, err)
	var info micro.Info
	require.NoError(t, json.Unmarshal(rep.Data, &info))
	require.Equal(t, "queen", info.Name)
	subjects := map[string]bool{}
	for _, ep := range info.Endpoints {
		subjects[ep.Subject] = true
	}
	for _, s := range []string{"queen.v1.push", "queen.v1.configure", "queen.v1.pop", "queen.v1.ack", "queen.v1.ack.batch", "queen.v1.transaction", "queen.v1.lease.extend"} {
		require.True(t, subjects[s], s)
	}
	request(t, nc, "queen.v1.push", `{`)
	rep, err = nc.Request("$SRV.STATS.queen", nil, 20*time.Second)
	require.NoError(t, err)
	var st micro.Stats
	require.NoError(t, json.Unmarshal(rep.Data, &st))
	for _, ep := range st.Endpoints {
		if ep.Subject == "queen.v1.push" {
			require.Equal(t, 1, ep.NumRequests)
			require.Equal(t, 1, ep.NumErrors, "an error reply counts")
		}
	}
}

func TestNATSRefusesBadSettings(t *testing.T) {
	svc := transport.NewService(transport.Config{})
	_, err := svc.NewNATS(transport.NATSConfig{Version: "v1"})
	require.Error(t, err)
	require.Contains(t, err.Error(), "NATSConfig.Conn")
	require.Contains(t, err.Error(), "NATSConfig.Version")
}
