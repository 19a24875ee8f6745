-- Writes a consumer row's state after a pop or an ack: $3 cursor, $4 lease
-- id (NULL releases the lease), $5 lease seconds from now (NULL keeps the
-- current expiry), $6 lease_to, $7 the failure counts of the messages above
-- the cursor (jsonb), $8 the bisection (jsonb, NULL: none; SPEC.md §4).
-- Returns the lease expiry. consume_update_many writes many rows the same
-- way in one statement; keep the two in step.
--
-- A write that takes a lease ($4 and $5 not NULL: a pop) records it in
-- queen.consumer_leases in the same statement (migration 0014): the lease
-- row names the group and the partition, and its expiry is raised to the
-- row's (an existing row of the same lease gains the partition). An ack
-- that keeps the lease ($5 NULL) or releases it writes no lease row.
WITH w AS (
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
    RETURNING lease_id, lease_expires_at
), l AS (
    INSERT INTO queen.consumer_leases AS l (lease_id, consumer_group, partition_ids, expires_at)
    SELECT w.lease_id, $2, ARRAY[$1::uuid], w.lease_expires_at
      FROM w
     WHERE $5::float8 IS NOT NULL AND w.lease_id IS NOT NULL
    ON CONFLICT (lease_id) DO UPDATE
       SET partition_ids = ARRAY(SELECT DISTINCT x FROM unnest(l.partition_ids || EXCLUDED.partition_ids) AS x),
           expires_at    = GREATEST(l.expires_at, EXCLUDED.expires_at)
)
SELECT lease_expires_at FROM w
