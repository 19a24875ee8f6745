-- queen:layout 4
-- Segments name their partition by its number (issue 42: bytes per
-- message, spread). A segment row and its segments_offset entry carried the
-- partition as a uuid: 16 bytes in the row and 16 in the index key, written
-- to the WAL with every segment, and with traffic spread over many
-- partitions a segment holds about one message. queen.partitions.num
-- (migration 0024: a bigint identity, never reused) takes its place:
-- segments.partition_num, and segments_offset on (partition_num,
-- first_offset). The index entry shrinks from 32 to 24 bytes (about 30 %
-- fewer index pages, so fewer splits and fewer full-page images), the row
-- by 8: measured on a copy of the table, 2,400,000 segments over 10,000
-- partitions in commits of 3,000, 445 -> 417 bytes of WAL a segment.
--
-- A push learns each partition's number with its row lock: the allocator
-- rows (queen.partition_ends, migration 0019) gain a num column, filled by
-- the statements that insert them (ensure_partition(s),
-- partition_ends_ensure) and returned by bundle_lock.
--
-- The segments are rewritten once: a new tree of the same shape (the list
-- partitions segments_kept and segments_timed, every range listed in
-- queen.segment_ranges under its name, bounds, check and storage) is filled
-- from the old one, joined with queen.partitions (segments of a partition
-- deleted since, which nothing reads, are left out), indexed, and the old
-- tree is dropped. A range detached from segments_timed and awaiting its
-- drop is rewritten in the new shape and left detached, so
-- queen.segment_drop_detached drops it (or attaches it back) as before. Rows
-- of a range attached but not listed (only made by hand) go to
-- segments_kept, untimed, as bundle_insert routes a segment no listed range
-- holds. The rewrite writes the stored segments once more (the WAL of their
-- size) and, in one transaction, holds the old and the new tree until it
-- commits (free disk of about the segments' size is needed) and a few
-- locks per range: plan the upgrade for it (README, Upgrading).
--
-- A layout migration (persistence.LayoutMarker): brokers of an older
-- release write segments.partition_id, which is gone, so once this runs
-- their pushes fail and never answer `queued`; Migrate refuses to run it
-- while such a broker is live.

ALTER TABLE queen.partition_ends ADD COLUMN num bigint;
UPDATE queen.partition_ends e SET num = p.num FROM queen.partitions p WHERE p.id = e.partition_id;
DELETE FROM queen.partition_ends WHERE num IS NULL;
ALTER TABLE queen.partition_ends ALTER COLUMN num SET NOT NULL;

-- The old tree, renamed out of the way: its indexes are dropped first (the
-- rewrite reads it whole), its leaves renamed so the new ones take their
-- names.
DROP INDEX queen.segments_offset;
DROP INDEX queen.segments_created_at;
ALTER TABLE queen.segments RENAME TO segments_0024;
ALTER TABLE queen.segments_kept RENAME TO segments_kept_0024;
ALTER TABLE queen.segments_timed RENAME TO segments_timed_0024;

CREATE TABLE queen.segments (
    partition_num bigint      NOT NULL,
    first_offset  bigint      NOT NULL,
    last_offset   bigint      NOT NULL,
    created_at    timestamptz NOT NULL,
    legacy_ids    bytea       NOT NULL DEFAULT '',
    frames        bytea       NOT NULL,
    timed         boolean     NOT NULL DEFAULT false,
    hashes        bytea,
    producer_sub  text        DEFAULT ''
) PARTITION BY LIST (timed);

-- Column storage is set on every leaf (migration 0010; the body of
-- queen.segment_storage, written here because a migration runs before the
-- function files are applied).
CREATE TABLE queen.segments_kept PARTITION OF queen.segments FOR VALUES IN (false);
ALTER TABLE queen.segments_kept ALTER COLUMN legacy_ids SET STORAGE EXTERNAL;
ALTER TABLE queen.segments_kept ALTER COLUMN frames SET STORAGE EXTERNAL;
ALTER TABLE queen.segments_kept ALTER COLUMN hashes SET STORAGE EXTERNAL;
CREATE TABLE queen.segments_timed PARTITION OF queen.segments FOR VALUES IN (true) PARTITION BY RANGE (created_at);

DO $$
DECLARE
    r record;
    attached boolean;
BEGIN
    FOR r IN SELECT g.name, g.lo, g.hi FROM queen.segment_ranges g
              WHERE to_regclass(format('queen.%I', g.name)) IS NOT NULL
              ORDER BY g.lo
    LOOP
        attached := EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhrelid = format('queen.%I', r.name)::regclass);
        EXECUTE format('ALTER TABLE queen.%I RENAME TO %I', r.name, r.name || '_0024');
        EXECUTE format('CREATE TABLE queen.%I (LIKE queen.segments INCLUDING DEFAULTS) '
                       'WITH (autovacuum_enabled = false, toast.autovacuum_enabled = false)', r.name);
        EXECUTE format('ALTER TABLE queen.%I ALTER COLUMN legacy_ids SET STORAGE EXTERNAL', r.name);
        EXECUTE format('ALTER TABLE queen.%I ALTER COLUMN frames SET STORAGE EXTERNAL', r.name);
        EXECUTE format('ALTER TABLE queen.%I ALTER COLUMN hashes SET STORAGE EXTERNAL', r.name);
        EXECUTE format('INSERT INTO queen.%I (partition_num, first_offset, last_offset, created_at, legacy_ids, frames, timed, hashes, producer_sub) '
                       'SELECT p.num, s.first_offset, s.last_offset, s.created_at, s.legacy_ids, s.frames, s.timed, s.hashes, s.producer_sub '
                       '  FROM queen.%I s JOIN queen.partitions p ON p.id = s.partition_id',
                       r.name, r.name || '_0024');
        EXECUTE format('DROP TABLE queen.%I', r.name || '_0024');
        EXECUTE format('ALTER TABLE queen.%I ADD CONSTRAINT %I CHECK (timed AND created_at >= %L AND created_at < %L)',
                       r.name, r.name || '_bounds', r.lo, r.hi);
        IF attached THEN
            EXECUTE format('ALTER TABLE queen.segments_timed ATTACH PARTITION queen.%I FOR VALUES FROM (%L) TO (%L)',
                           r.name, r.lo, r.hi);
        END IF;
    END LOOP;
END
$$;

-- segments_kept, and what is left in the old segments_timed: the rows of
-- ranges attached but not listed, untimed.
INSERT INTO queen.segments_kept (partition_num, first_offset, last_offset, created_at, legacy_ids, frames, timed, hashes, producer_sub)
SELECT p.num, s.first_offset, s.last_offset, s.created_at, s.legacy_ids, s.frames, false, s.hashes, s.producer_sub
  FROM queen.segments_0024 s
  JOIN queen.partitions p ON p.id = s.partition_id;

DROP TABLE queen.segments_0024;

CREATE INDEX segments_offset ON queen.segments (partition_num, first_offset);
CREATE INDEX segments_created_at ON queen.segments USING brin (created_at);
