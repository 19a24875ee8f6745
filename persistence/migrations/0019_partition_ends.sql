-- queen:layout 2
-- A partition's allocator and write lock move to an UNLOGGED row (issue 42,
-- SPEC.md §2, DESIGN.md "fixed costs belong to a commit"). Until now every
-- (partition, commit) took the partition row's lock (FOR NO KEY UPDATE, a
-- heap lock record, ~56 bytes of WAL) and then updated its last_offset (a
-- HOT update, ~80 bytes): about 134 bytes of WAL per message when traffic
-- is spread over many partitions (one message per partition per commit),
-- and nothing of it is needed to recover, because the segments already
-- say where each partition ends. Now:
--
--  * queen.partition_ends holds one UNLOGGED row per partition, its last
--    offset (-1 before the first message). A push and a transaction lock
--    the rows of the partitions they write (the write authority: the row
--    lock that serialises a partition's writers and fences its dedup
--    decision) and advance them in their commit. An UNLOGGED row's lock
--    and update write no WAL.
--  * partitions.last_offset becomes partitions.floor_offset: a floor under
--    the end, written only when segments are deleted or dropped (retention
--    raises it to the last offset of every segment it removes). So a
--    partition's end is always GREATEST(floor_offset, the last offset of its
--    newest segment) (queen.partition_cold_end).
--  * A crash or a failover empties UNLOGGED tables. A row missing from
--    partition_ends is rebuilt from that rule (partition_ends_ensure, by a
--    push that finds it missing, and for every partition by each broker's
--    start and retention pass); until then readers compute the end the same
--    way.
--
-- A layout migration (persistence.LayoutMarker): brokers of an older release
-- lock and advance partitions.last_offset, which the rename removes, so
-- once this runs their pushes and reads fail and never answer `queued`
-- beside a broker that locks partition_ends; Migrate refuses to run it
-- while such a broker is live.

-- fillfactor 50: every commit updates its partitions' rows, and free space
-- on the page keeps each update HOT (no index entry, pruned in place).
CREATE UNLOGGED TABLE queen.partition_ends (
    partition_id uuid   PRIMARY KEY,
    last_offset  bigint NOT NULL
) WITH (fillfactor = 50);

INSERT INTO queen.partition_ends (partition_id, last_offset)
SELECT id, last_offset FROM queen.partitions;

ALTER TABLE queen.partitions RENAME COLUMN last_offset TO floor_offset;
