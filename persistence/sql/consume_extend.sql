-- Extends live lease $1 to at least $2 seconds from now ($2 <= 0: the
-- queue's leaseTime), asking for at most the greater of the queue's
-- leaseTime and $3 seconds (queen.MaxLeaseExtendSeconds; more is capped);
-- never shortens it. No row: the lease is not live.
UPDATE queen.consumers c
SET lease_expires_at = GREATEST(c.lease_expires_at,
        clock_timestamp() + make_interval(secs => CASE
            WHEN $2::bigint > 0 THEN LEAST($2::bigint, GREATEST(COALESCE((q.options ->> 'leaseTime')::bigint, 300), $3::bigint))
            ELSE COALESCE((q.options ->> 'leaseTime')::bigint, 300) END)),
    updated_at = clock_timestamp()
FROM queen.queues q
WHERE q.id = c.queue_id AND c.lease_id = $1 AND c.lease_expires_at > clock_timestamp()
RETURNING c.lease_expires_at
