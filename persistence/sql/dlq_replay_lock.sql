-- Serialises DLQ replays of the same dead letters (SPEC.md §13): a
-- transaction-scoped advisory lock per dead letter id of $1 (bigint[]),
-- taken in ascending key order so that replays of overlapping sets cannot
-- deadlock, held until the replay's transaction ends (after its push and
-- its delete). Keys (7307011, hashint8(id)): the two-key space, apart from
-- the one-key locks of migrations and retention; a hash collision only
-- serialises two unrelated dead letters. Advisory locks, not row locks:
-- deleting a queue (which cascades to its dead letters while holding its
-- partitions' row locks) never waits for a replay whose push waits for it.
SELECT count(pg_advisory_xact_lock(7307011, k))
FROM (SELECT DISTINCT hashint8(id) AS k FROM unnest($1::bigint[]) AS id ORDER BY k) AS keys
