-- Writes a consumer row's state after a pop or an ack: $3 cursor, $4 lease
-- id (NULL releases the lease), $5 lease seconds from now (NULL keeps the
-- current expiry), $6 lease_to, $7 the failure counts of the messages above
-- the cursor (jsonb), $8 the bisection (jsonb, NULL: none; SPEC.md §4).
-- Returns the lease expiry. consume_update_many writes many rows the same
-- way in one statement; keep the two in step.
UPDATE queen.consumers
SET "cursor"         = $3,
    lease_id         = $4,
    lease_expires_at = CASE WHEN $4::uuid IS NULL THEN NULL
                            WHEN $5::float8 IS NULL THEN lease_expires_at
                            ELSE clock_timestamp() + make_interval(secs => $5::float8) END,
    lease_to         = CASE WHEN $4::uuid IS NULL THEN NULL ELSE $6::bigint END,
    fail_counts      = $7::jsonb,
    bisect           = $8::jsonb,
    updated_at       = clock_timestamp()
WHERE partition_id = $1 AND consumer_group = $2
RETURNING lease_expires_at
