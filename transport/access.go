package transport

import (
	"context"
	"net/http"
	"strings"

	queen "github.com/queen-mq/queen-go"
	"github.com/queen-mq/queen-go/transport/auth"
	"github.com/queen-mq/queen-go/transport/wire"
)

// jwtGuard wraps an HTTP route's handler with the JWT check of its level
// (Config.JWT, SPEC.md §14): a public route or a JWT_SKIP_PATHS path runs
// as is; any other answers 401 or 403 (auth.Verifier.Check) before its body
// is read, or runs with the caller's auth.Identity and Authorization header
// in its context (queen.WithAuthorization: the shard router sends it along
// on its hops).
func (s *Service) jwtGuard(rt route, h http.Handler) http.Handler {
	if rt.level == auth.Public {
		return h
	}
	name := rt.method + " " + rt.path
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.JWT.Skip(r.URL.Path) {
			h.ServeHTTP(w, r)
			return
		}
		id, e := s.cfg.JWT.Check(r.Context(), r.Header.Get("Authorization"), rt.level, name)
		if e != nil {
			rep := errReply(e)
			setChallenge(w, rep)
			writeReply(w, rep)
			return
		}
		ctx := queen.WithAuthorization(auth.NewContext(r.Context(), id), r.Header.Get("Authorization"))
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

// checkNATS is the JWT check of a NATS request on a subject of level need
// (Config.JWT): ctx with the caller's identity and Authorization header
// (queen.WithAuthorization), or the 401/403 reply. With JWT off it lets
// everything through.
func (s *Service) checkNATS(ctx context.Context, authorization string, need auth.Level, subject string) (context.Context, *reply) {
	if s.cfg.JWT == nil || need == auth.Public {
		return ctx, nil
	}
	id, e := s.cfg.JWT.Check(ctx, authorization, need, subject)
	if e != nil {
		rep := errReply(e)
		return ctx, &rep
	}
	return queen.WithAuthorization(auth.NewContext(ctx, id), authorization), nil
}

// setChallenge sets WWW-Authenticate on a 401 or 403 reply (RFC 6750).
func setChallenge(w http.ResponseWriter, rep reply) {
	switch rep.status {
	case http.StatusUnauthorized:
		w.Header().Set("WWW-Authenticate", `Bearer realm="queen"`)
	case http.StatusForbidden:
		w.Header().Set("WWW-Authenticate", `Bearer realm="queen", error="insufficient_scope"`)
	}
}

// mayDeleteData is configure's refusal for a change that deletes data
// (Service.configure), nil when the caller may make it. With JWT on the
// caller needs the admin level: the identity the guard put in ctx (403
// forbidden below it; 401 when the request carried none, a JWT_SKIP_PATHS
// path). With JWT off it needs the admin token in authorization, when one
// is configured (401 unauthorized without it).
func (s *Service) mayDeleteData(ctx context.Context, authorization string) func(queue string, loss []string) *queen.Error {
	if s.cfg.JWT != nil {
		id, ok := auth.FromContext(ctx)
		if ok && id.Level >= auth.Admin {
			return nil
		}
		return func(queue string, loss []string) *queen.Error {
			if !ok {
				return queen.ErrUnauthorized.With("this configure of the existing queue %q deletes data or gives up dedup (%s): it needs a token of the admin level (Authorization: Bearer <JWT>)",
					queue, strings.Join(loss, ", "))
			}
			return queen.ErrForbidden.With("this configure of the existing queue %q deletes data or gives up dedup (%s): it needs the admin level and this token (sub %q) has %s",
				queue, strings.Join(loss, ", "), id.Subject, id.Level)
		}
	}
	if s.authorized(authorization) {
		return nil
	}
	return func(queue string, loss []string) *queen.Error {
		return queen.ErrUnauthorized.With("this configure of the existing queue %q deletes data or gives up dedup (%s): it needs the header Authorization: Bearer <token>, the broker's QUEEN_ADMIN_TOKEN (missing or wrong)",
			queue, strings.Join(loss, ", "))
	}
}

// producerOf is the producer identity of a push in ctx (SPEC.md §14): the
// verified token's "sub" with JWT on; "" with JWT off (a producerSub in
// the body is never read: wire.DecodePush ignores it).
func producerOf(ctx context.Context) string {
	id, _ := auth.FromContext(ctx)
	return id.Subject
}

// whoami answers GET /api/v1/auth/whoami (whoamiOf), with the challenge
// header on a 401.
func (s *Service) whoami(w http.ResponseWriter, r *http.Request) {
	rep := s.whoamiOf(r.Context(), r.Header.Get("Authorization"))
	setChallenge(w, rep)
	writeReply(w, rep)
}

// whoamiOf answers GET /api/v1/auth/whoami and queen.v1.auth.whoami: 200
// with a wire.WhoamiReply describing the credential the request presented
// (authorization, the Authorization header's value), so that a client (the
// console, `queen whoami`) shows who is signed in and what its level
// allows, as the broker decides it rather than by decoding the token
// itself.
//
//   - JWT on: the token's sub, level, roles and expiry. The route's guard
//     (level read-only: any valid token) has verified it and put it in ctx;
//     on a JWT_SKIP_PATHS path it is verified here. Without a valid token:
//     401 unauthorized saying why (auth.Verifier.Verify), as on every route.
//   - JWT off, QUEEN_ADMIN_TOKEN set: role admin, access "admin-token"; the
//     admin guard has answered 401 unauthorized without the token.
//   - JWT off, no admin token: role admin, access "open" (no access control).
//
// It reads nothing but the credential.
func (s *Service) whoamiOf(ctx context.Context, authorization string) reply {
	out := wire.WhoamiReply{Role: auth.Admin.String(), Roles: []string{}}
	switch {
	case s.cfg.JWT != nil:
		id, ok := auth.FromContext(ctx)
		if !ok {
			var e *queen.Error
			if id, e = s.cfg.JWT.Verify(ctx, authorization); e != nil {
				return errReply(e)
			}
		}
		out.Access, out.Sub, out.Role = wire.AccessJWT, id.Subject, id.Level.String()
		if len(id.Roles) > 0 {
			out.Roles = id.Roles
		}
		if !id.ExpiresAt.IsZero() {
			exp := id.ExpiresAt
			out.ExpiresAt = &exp
		}
	case s.adminToken != nil:
		out.Access = wire.AccessAdminToken
	default:
		out.Access = wire.AccessOpen
	}
	return reply{status: http.StatusOK, body: out}
}
