package auth

import (
	"context"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"
)

// TestVerifiedTokensAreCachedUntilTheyExpire: a token that verified is
// taken again from the cache (its identity the same), and not after its
// "exp": then it is verified again and refused, expired.
func TestVerifiedTokensAreCachedUntilTheyExpire(t *testing.T) {
	const secret = "a-secret-of-thirty-two-bytes-at-least!"
	now := time.Now().Truncate(time.Second)
	clock := now
	v, err := New(Config{Algorithm: "HS256", Secret: secret, now: func() time.Time { return clock }})
	require.NoError(t, err)
	defer v.Close()
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": "svc-a", "role": "read-write", "exp": now.Add(10 * time.Second).Unix(),
	}).SignedString([]byte(secret))
	require.NoError(t, err)
	id, e := v.Verify(context.Background(), "Bearer "+tok)
	require.Nil(t, e)
	require.Equal(t, ReadWrite, id.Level)
	require.Len(t, v.verified, 1)
	again, e := v.Verify(context.Background(), "Bearer "+tok)
	require.Nil(t, e)
	require.Equal(t, id, again)

	clock = now.Add(10*time.Second + v.cfg.ClockSkew + time.Second)
	_, e = v.Verify(context.Background(), "Bearer "+tok)
	require.NotNil(t, e, "an expired token is not taken from the cache")
	require.Equal(t, "unauthorized", e.Code)
	require.Contains(t, e.Message, "expired")
}
