package transport

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"

	queen "github.com/queen-mq/queen-go"
)

// Operator is the operator API of SPEC.md §13 the transports need
// (persistence.Store).
type Operator interface {
	// InspectDedup answers the dedup inspector for the transactionId whose
	// hash is h in partition (queue, partition); queen.ErrNotFound when the
	// queue or partition does not exist.
	InspectDedup(ctx context.Context, queue, partition string, h queen.Hash) (queen.DedupInspection, error)
}

// dedup answers GET /api/v1/dedup and queen.v1.dedup (SPEC.md §13): 200 with
// a queen.DedupInspection; 400 for bad input, 404 for an unknown queue or
// partition. It writes nothing.
func (s *Service) dedup(ctx context.Context, q queen.DedupQuery, err error) reply {
	if err != nil {
		return errReply(err)
	}
	if s.cfg.Operator == nil {
		return errReply(queen.ErrNotFound.With("this broker has no dedup inspector"))
	}
	res, err := s.cfg.Operator.InspectDedup(ctx, q.Queue, q.Partition, q.Hash)
	if err != nil {
		return errReply(err)
	}
	return reply{status: http.StatusOK, body: res}
}

// authorized reports whether an admin request may run: no token configured,
// or the Authorization value is "Bearer <token>" (the scheme in any case).
// The comparison is in constant time (of SHA-256 digests, so the token's
// length does not show either).
func (s *Service) authorized(header string) bool {
	if s.adminToken == nil {
		return true
	}
	const scheme = "bearer "
	if len(header) < len(scheme) || !strings.EqualFold(header[:len(scheme)], scheme) {
		return false
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(header[len(scheme):])))
	return subtle.ConstantTimeCompare(got[:], s.adminToken[:]) == 1
}

// unauthorized is the 401 of an admin route without the right token.
func unauthorized() reply {
	return errReply(queen.ErrUnauthorized.With("this admin route needs the header Authorization: Bearer <token>, the broker's QUEEN_ADMIN_TOKEN (missing or wrong)"))
}

// admin guards an HTTP admin route with the admin token (Config.AdminToken).
func (s *Service) admin(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.authorized(r.Header.Get("Authorization")) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="queen"`)
			writeReply(w, unauthorized())
			return
		}
		h(w, r)
	}
}
