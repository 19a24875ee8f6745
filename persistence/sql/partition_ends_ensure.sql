-- Rebuilds the queen.partition_ends rows (migration 0019) that a crash or a
-- failover emptied, from what is logged (queen.partition_cold_end): for the
-- partitions $1 (uuid[]), or for every partition when $1 is NULL (each
-- broker's start and retention pass). A row another session inserts
-- meanwhile wins (its writer held it locked, so its value is newer). With
-- $1 NULL it also deletes any row whose partition is gone. Returns the number of rows inserted.
--
-- With $1 NULL it does nothing while queen.partition_ends_alive has its row
-- (migration 0026: no crash emptied the rows since the last full rebuild;
-- a crash empties both tables at once), and inserts that row with the rows
-- it rebuilt, in the same statement. Rebuilds of named partitions (a push
-- or a transaction that found its rows gone) leave it out: the rest are
-- still missing until a full rebuild.
WITH done AS MATERIALIZED (
    SELECT $1::uuid[] IS NULL AND EXISTS (SELECT 1 FROM queen.partition_ends_alive) AS whole
), gone AS (
    DELETE FROM queen.partition_ends e
     WHERE $1::uuid[] IS NULL AND NOT (SELECT d.whole FROM done d)
       AND NOT EXISTS (SELECT 1 FROM queen.partitions p WHERE p.id = e.partition_id)
), marked AS (
    INSERT INTO queen.partition_ends_alive (alive)
    SELECT true FROM done d WHERE $1::uuid[] IS NULL AND NOT d.whole
    ON CONFLICT (alive) DO NOTHING
), l AS (
    -- FOR KEY SHARE: a queue's deletion (admin_delete_queue_lock, FOR
    -- UPDATE) waits for this rebuild and then deletes the row it inserted,
    -- or this finds the partition gone and inserts nothing; so no row
    -- outlives its partition, and a push's lock (bundle_lock) needs no
    -- check that the partition exists. Rows are rebuilt rarely: the lock
    -- record costs nothing measurable.
    SELECT p.id, p.num, p.floor_offset
      FROM queen.partitions p
     WHERE ($1::uuid[] IS NULL OR p.id = ANY ($1::uuid[]))
       AND NOT (SELECT d.whole FROM done d)
       AND NOT EXISTS (SELECT 1 FROM queen.partition_ends e WHERE e.partition_id = p.id)
       FOR KEY SHARE OF p
), ins AS (
    INSERT INTO queen.partition_ends (partition_id, last_offset, num)
    SELECT l.id, queen.partition_cold_end(l.id, l.floor_offset), l.num
      FROM l
    ON CONFLICT (partition_id) DO NOTHING
    RETURNING 1
)
SELECT count(*) FROM ins
