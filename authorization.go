package queen

import "context"

// authorizationKey is the context key of a request's Authorization header.
type authorizationKey struct{}

// WithAuthorization returns ctx carrying authorization, the Authorization
// header ("Bearer <JWT>") of the client request being served, as the
// front door verified it with JWT on (SPEC.md §14). The shard router sends
// it along on the internal hop to the broker that owns a shard, whose
// shard server verifies it again: a hop without it is refused, so the
// shard subjects take no push the front door would have refused.
func WithAuthorization(ctx context.Context, authorization string) context.Context {
	return context.WithValue(ctx, authorizationKey{}, authorization)
}

// AuthorizationFrom returns the Authorization header WithAuthorization put
// in ctx, "" when there is none (JWT off).
func AuthorizationFrom(ctx context.Context) string {
	a, _ := ctx.Value(authorizationKey{}).(string)
	return a
}
