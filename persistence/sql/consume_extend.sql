-- Extends live lease $1 to at least $2 seconds from now ($2 <= 0: the
-- queue's leaseTime), asking for at most the greater of the queue's
-- leaseTime and $3 seconds (queen.MaxLeaseExtendSeconds; more is capped);
-- never shortens it. Returns the earliest expiry of the rows extended; no
-- row: the lease is not live (expired, released or unknown).
--
-- The consumer rows are found through queen.consumer_leases (migration
-- 0014): the lease row by its primary key, then each partition it lists
-- (one row per element of partition_ids) by the consumer rows' primary key,
-- never a scan of queen.consumers: the store runs it planned for its
-- arguments on every call, and the queue's options are read per row (a
-- join with queen.queues would offer the planner the index on (queue_id,
-- consumer_group), a scan of the group's every row;
-- TestLeasePlansStayIndexed). Only the rows whose lease is still $1 and
-- live are extended, as before the lease rows: a listed partition released
-- or leased again under another id does not match. The lease row's expires_at is raised to the greatest expiry
-- granted in the same statement, by an upsert, so a lease row the retention
-- pass deleted meanwhile (it saw it expired an instant before this
-- statement's check) is written back and the invariant holds: no row
-- leased under $1 expires after its lease row.
WITH l AS (
    SELECT consumer_group, partition_ids
      FROM queen.consumer_leases
     WHERE lease_id = $1
), e AS (
    UPDATE queen.consumers c
       SET lease_expires_at = GREATEST(c.lease_expires_at, clock_timestamp() + make_interval(secs => (
               SELECT CASE WHEN $2::bigint > 0
                           THEN LEAST($2::bigint, GREATEST(COALESCE((q.options ->> 'leaseTime')::bigint, 300), $3::bigint))
                           ELSE COALESCE((q.options ->> 'leaseTime')::bigint, 300) END
                 FROM queen.queues q
                WHERE q.id = c.queue_id))),
           updated_at = clock_timestamp()
      FROM (SELECT unnest(l.partition_ids) AS pid, l.consumer_group AS grp FROM l) v
     WHERE c.partition_id = v.pid AND c.consumer_group = v.grp
       AND c.lease_id = $1 AND c.lease_expires_at > clock_timestamp()
    RETURNING c.lease_expires_at
), r AS (
    INSERT INTO queen.consumer_leases AS r (lease_id, consumer_group, partition_ids, expires_at)
    SELECT $1, l.consumer_group, l.partition_ids, x.at
      FROM l, (SELECT max(lease_expires_at) AS at FROM e) x
     WHERE x.at IS NOT NULL
    ON CONFLICT (lease_id) DO UPDATE SET expires_at = GREATEST(r.expires_at, EXCLUDED.expires_at)
)
SELECT min(lease_expires_at) FROM e HAVING count(*) > 0
