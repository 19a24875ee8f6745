-- Consumer rows updated in place (issue 28). Every pop sets a consumer row's
-- lease_id and every ack clears it; in PostgreSQL an update that changes an
-- indexed column cannot be HOT, so the partial index consumers_lease made
-- each of them a new heap tuple plus an entry in each of the table's four
-- indexes. Without it no update of queen.consumers changes an indexed
-- column (partition_id, consumer_group and queue_id never change), so each
-- can be HOT: a new version on the same page, no index entry.
--
-- The two lookups by lease id alone (an extend that names only a leaseId,
-- consume_extend; a transaction's requiredLeases, txn_leases; SPEC.md §4,
-- §5) go through queen.consumer_leases instead: one row per leased pop (not
-- per partition), written by the pop's own statement that sets the consumer
-- rows' lease (consume_update, consume_update_many), naming the consumer
-- group and the partitions it leased. It is only an index: the consumer
-- rows stay the authority (a row counts for lease L only while its lease_id
-- is L and its lease_expires_at is in the future), so a row released by an
-- ack, an expiry or a seek, or re-leased under another id, is still listed
-- and simply does not match. expires_at is never below the expiry of any
-- consumer row leased under lease_id (the pop writes the greatest, an extend
-- raises it to what it granted), so once it is past no row under the lease
-- is live and the retention pass deletes the row (retention_leases). The
-- table holds about (leasing pops per second) x (leaseTime, default 300 s)
-- rows: 300 pops/s hold about 90,000. A deleted queue's or group's rows are
-- left to that purge.
CREATE TABLE queen.consumer_leases (
    lease_id       uuid        PRIMARY KEY,
    consumer_group text        NOT NULL,
    partition_ids  uuid[]      NOT NULL,
    expires_at     timestamptz NOT NULL
);

-- The leases held at the upgrade (live or expired, unsettled), so an extend
-- or a transaction after it still finds them; the expired ones go with the
-- first retention pass.
INSERT INTO queen.consumer_leases (lease_id, consumer_group, partition_ids, expires_at)
SELECT lease_id, consumer_group, array_agg(partition_id ORDER BY partition_id), max(lease_expires_at)
  FROM queen.consumers
 WHERE lease_id IS NOT NULL AND lease_expires_at IS NOT NULL
 GROUP BY lease_id, consumer_group
ON CONFLICT (lease_id) DO NOTHING;

DROP INDEX queen.consumers_lease;

-- consumers_group (consumer_group alone) served only DeleteGroup, which now
-- goes through consumers_queue (queue_id, consumer_group), queue by queue.
-- It also misled the planner: for a lookup of a consumer row by its primary
-- key whose group comes from another row (the lease rows above), the
-- planner cannot tell how many rows a group has and may prefer it to the
-- primary key, reading the group's every row (TestLeasePlansStayIndexed).
-- Like the others it never blocked a HOT update; it only cost an entry per
-- consumer row.
DROP INDEX queen.consumers_group;

-- Room on each page for the next version of its rows: a HOT update needs
-- free space on the row's own page, and a consumer row (about 150 to 250
-- bytes) is rewritten by every pop and every ack. At 50 % a page filled by
-- inserts keeps half of itself free, a new version for every row on it
-- before pruning (done by the next access to a page short of space) has to
-- reclaim the dead ones. New pages follow it at once; pages already full
-- gain room as their rows move off them.
ALTER TABLE queen.consumers SET (fillfactor = 50);
