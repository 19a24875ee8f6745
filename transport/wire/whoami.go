package wire

import "time"

// The ways a broker decides who may call it (WhoamiReply.Access).
const (
	// AccessJWT: JWT_ENABLED is on (SPEC.md §14); the caller is the
	// verified token's subject, its level from the token's roles.
	AccessJWT = "jwt"
	// AccessAdminToken: JWT is off and QUEEN_ADMIN_TOKEN is set (SPEC.md
	// §13); the caller presented the admin token and may do everything.
	AccessAdminToken = "admin-token"
	// AccessOpen: JWT is off and no admin token is set: the broker has no
	// access control and anyone who reaches it may do everything.
	AccessOpen = "open"
)

// WhoamiReply is the body of GET /api/v1/auth/whoami: who the broker takes
// the caller of the request to be, by the credential it presented (the
// Authorization header), and the access level it reaches (SPEC.md §14).
// The console signs in with it. Every field is always present.
type WhoamiReply struct {
	// Access is how the broker decides access: AccessJWT, AccessAdminToken
	// or AccessOpen.
	Access string `json:"access"`
	// Sub is the token's "sub" with JWT on ("" for a token without one);
	// "" for the admin token and an open broker.
	Sub string `json:"sub"`
	// Role is the access level the caller reaches, by its level name
	// (auth.Level.String): "read-only" (any valid token), "read-write" or
	// "admin" (the token's roles, named by JWT_ROLE_READ_WRITE and
	// JWT_ROLE_ADMIN); "admin" for the admin token and an open broker.
	Role string `json:"role"`
	// Roles are the token's roles as its claims name them
	// (JWT_ROLES_CLAIM, then JWT_ROLES_ARRAY_CLAIM); [] for a token with
	// none, the admin token and an open broker.
	Roles []string `json:"roles"`
	// ExpiresAt is the token's "exp" (UTC, RFC 3339); null when it has
	// none, for the admin token and an open broker.
	ExpiresAt *time.Time `json:"expiresAt"`
}
