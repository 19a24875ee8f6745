-- Deletes up to $1 rows of queen.consumer_leases whose expires_at is past
-- (migration 0014): no consumer row leased under such a lease is live, so
-- an extend or a transaction's requiredLeases that finds no row answers as
-- it answers for an expired lease. Returns the rows deleted (twice, as the
-- other retention statements return rows and messages). The table holds
-- about (leasing pops per second) x leaseTime rows and has no index on
-- expires_at (every pop would pay for one): the scan stops once it has $1
-- rows. The DELETE checks expires_at again on the row it deletes, so a
-- lease an extend raised meanwhile stays.
WITH d AS (
    DELETE FROM queen.consumer_leases x
     WHERE x.lease_id = ANY (ARRAY(
        SELECT y.lease_id
          FROM queen.consumer_leases y
         WHERE y.expires_at <= clock_timestamp()
         LIMIT $1::bigint))
       AND x.expires_at <= clock_timestamp()
    RETURNING 1
)
SELECT count(*), count(*) FROM d
