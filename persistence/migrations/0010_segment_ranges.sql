-- Segments in time ranges (SPEC.md §7: retention keeps pace). Deleting
-- expired segments one row at a time wrote every deleted heap and TOAST
-- page again (full-page images after each checkpoint), left vacuum to
-- clean up behind, and fell behind the push rate: at 40,000 messages/s
-- with a 10-minute retention the oldest segment was 15 minutes old and the
-- database kept growing. Now the segments of a queue with retentionSeconds
-- go to a table range-partitioned on created_at, and retention drops a
-- whole range once every row in it is past its queue's retention.
--
-- queen.segments is partitioned by LIST (timed):
--  * segments_kept (timed = false): the segments of queues without
--    retentionSeconds when they were pushed. A plain table; retention
--    deletes its rows one segment at a time when a queue gains a retention
--    (or by completedRetentionSeconds).
--  * segments_timed (timed = true), partitioned by RANGE (created_at):
--    ranges [lo, lo + span) with span a power of two of minutes (1 to
--    1024) and lo a multiple of it since the epoch (UTC), created ahead of
--    time by the brokers (persistence/segranges.go) and listed in
--    queen.segment_ranges. There is no DEFAULT partition: a segment is
--    timed only when its queue has a retention and a listed range holds
--    its created_at (bundle_insert); otherwise it goes to segments_kept
--    (a push never fails for a missing range). A DEFAULT partition would
--    be scanned, under a lock on it that every reader of segments
--    conflicts with, each time a range is added.
--
-- Ranges are added with CREATE TABLE and ATTACH PARTITION, which takes a
-- SHARE UPDATE EXCLUSIVE lock on segments_timed: pushes and reads go on
-- meanwhile. There is no primary key (a unique index must hold the
-- partition keys); the offset allocator under the partition row lock keeps
-- (partition_id, first_offset) unique, and segments_offset serves every
-- lookup by offset (one descent per range: the ranges alive are those of
-- the retained time, about 8 to 16 per retention in use).
ALTER TABLE queen.segments RENAME TO segments_0009;
ALTER INDEX queen.segments_pkey RENAME TO segments_0009_pkey;
ALTER INDEX queen.segments_created_at RENAME TO segments_0009_created_at;

CREATE TABLE queen.segments (
    partition_id uuid        NOT NULL,
    first_offset bigint      NOT NULL,
    last_offset  bigint      NOT NULL,
    created_at   timestamptz NOT NULL,
    message_ids  bytea       NOT NULL,
    frames       bytea       NOT NULL,
    timed        boolean     NOT NULL DEFAULT false
) PARTITION BY LIST (timed);
CREATE INDEX segments_offset ON queen.segments (partition_id, first_offset);

-- The storage of each column is set on every leaf table (a partition does
-- not take it from its parent): message_ids uncompressed out of line, so
-- substring() fetches one id's slice; frames compressed with lz4 where the
-- server has it.
CREATE FUNCTION queen.segment_storage(n text) RETURNS void
    LANGUAGE plpgsql
AS $$
BEGIN
    EXECUTE format('ALTER TABLE queen.%I ALTER COLUMN message_ids SET STORAGE EXTERNAL', n);
    IF 'lz4' = ANY (SELECT unnest(enumvals) FROM pg_settings WHERE name = 'default_toast_compression') THEN
        EXECUTE format('ALTER TABLE queen.%I ALTER COLUMN frames SET COMPRESSION lz4', n);
    END IF;
END
$$;

CREATE TABLE queen.segments_kept PARTITION OF queen.segments FOR VALUES IN (false);
SELECT queen.segment_storage('segments_kept');
CREATE TABLE queen.segments_timed PARTITION OF queen.segments FOR VALUES IN (true) PARTITION BY RANGE (created_at);

-- The ranges of segments_timed, for bundle_insert's routing and range
-- maintenance: written by the transaction that attaches or drops one.
CREATE TABLE queen.segment_ranges (
    name text        PRIMARY KEY,
    lo   timestamptz NOT NULL UNIQUE,
    hi   timestamptz NOT NULL
);

-- The span of the ranges a retention of r seconds asks for, in minutes:
-- the largest power of two not above r / 8 minutes, from 1 to 1024, so a
-- queue's retained time spans about 8 to 16 ranges and a range is dropped
-- at most one span after its newest row's retention. The ranges are made
-- with the span of the longest retention in use (segranges.go); 1 when r
-- is not positive.
CREATE FUNCTION queen.segment_span_minutes(r float8) RETURNS int
    LANGUAGE sql IMMUTABLE
AS $$ SELECT CASE WHEN r IS NULL OR r < 960 THEN 1
                  ELSE least(1024, power(2, floor(log(2, (r / 480)::numeric)))::int) END $$;

-- The name of the range [lo, lo + minutes).
CREATE FUNCTION queen.segment_range_name(lo timestamptz, minutes int) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT
AS $$ SELECT 'segments_' || to_char(lo AT TIME ZONE 'UTC', 'YYYYMMDD"_"HH24MI') || '_' || minutes || 'm' $$;

-- Creates the range [lo, hi) of segments_timed unless a table of its name
-- exists, and lists it in segment_ranges; true when it created it. Ranges
-- are insert-only and dropped whole, so autovacuum is off on them
-- (PostgreSQL still vacuums a table whose transaction ids near
-- wraparound). The table is made alone, then attached (a SHARE UPDATE
-- EXCLUSIVE lock on segments_timed, which pushes and reads do not wait
-- for); callers set a short lock_timeout first.
CREATE FUNCTION queen.segment_create_range(lo timestamptz, hi timestamptz) RETURNS boolean
    LANGUAGE plpgsql
AS $$
DECLARE
    n text := queen.segment_range_name(lo, (extract(epoch FROM hi - lo) / 60)::int);
BEGIN
    IF to_regclass(format('queen.%I', n)) IS NOT NULL THEN
        RETURN false;
    END IF;
    EXECUTE format('CREATE TABLE queen.%I (LIKE queen.segments INCLUDING DEFAULTS) '
                   'WITH (autovacuum_enabled = false, toast.autovacuum_enabled = false)', n);
    PERFORM queen.segment_storage(n);
    -- The constraint lets ATTACH skip its check of the rows (there are none).
    EXECUTE format('ALTER TABLE queen.%I ADD CONSTRAINT %I CHECK (timed AND created_at >= %L AND created_at < %L)', n, n || '_bounds', lo, hi);
    EXECUTE format('ALTER TABLE queen.segments_timed ATTACH PARTITION queen.%I FOR VALUES FROM (%L) TO (%L)', n, lo, hi);
    INSERT INTO queen.segment_ranges (name, lo, hi) VALUES (n, lo, hi);
    RETURN true;
END
$$;

-- The queues with rows in range n of segments_timed that still keep them
-- at time t: queues without retentionSeconds now, or whose retention
-- reaches past hi (t - retentionSeconds < hi). Found by a skip scan over
-- the range's distinct partitions (one index descent each); the queue rows
-- are read FOR SHARE, so a configure that changes a retention waits for
-- the caller's transaction (and the drop it decides).
CREATE FUNCTION queen.segment_range_keepers(n text, hi timestamptz, t timestamptz) RETURNS bigint
    LANGUAGE plpgsql
AS $$
DECLARE
    k bigint;
BEGIN
    EXECUTE format($q$
        WITH RECURSIVE d AS (
            (SELECT s.partition_id FROM queen.%1$I s ORDER BY s.partition_id LIMIT 1)
            UNION ALL
            SELECT (SELECT s.partition_id FROM queen.%1$I s WHERE s.partition_id > d.partition_id
                     ORDER BY s.partition_id LIMIT 1)
              FROM d WHERE d.partition_id IS NOT NULL
        ), qs AS (
            SELECT q.id, COALESCE((q.options ->> 'retentionSeconds')::float8, 0) AS r
              FROM queen.queues q
             WHERE q.id IN (SELECT p.queue_id FROM queen.partitions p
                             WHERE p.id IN (SELECT partition_id FROM d WHERE partition_id IS NOT NULL))
             FOR SHARE
        )
        SELECT count(*) FROM qs WHERE qs.r <= 0 OR $1 - make_interval(secs => qs.r) < $2
    $q$, n) INTO k USING t, hi;
    RETURN k;
END
$$;

-- Drops table n, a range detached from segments_timed (DETACH PARTITION
-- ... CONCURRENTLY, run by the caller: it takes no lock that pushes or
-- reads wait for), with upper bound hi, when every row in it is past its
-- queue's retentionSeconds now (no keeper left), and unlists it; else (a
-- configure raised a retention since the caller checked) attaches it back.
-- True when it dropped it. The table is no partition any more, so the
-- DROP locks nothing that pushes or reads use.
CREATE FUNCTION queen.segment_drop_detached(n text, lo timestamptz, hi timestamptz) RETURNS boolean
    LANGUAGE plpgsql
AS $$
BEGIN
    IF to_regclass(format('queen.%I', n)) IS NULL THEN
        DELETE FROM queen.segment_ranges WHERE name = n;
        RETURN false;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_inherits i WHERE i.inhrelid = format('queen.%I', n)::regclass) THEN
        RETURN false; -- still (or again) a partition
    END IF;
    IF hi > clock_timestamp() OR queen.segment_range_keepers(n, hi, clock_timestamp()) > 0 THEN
        EXECUTE format('ALTER TABLE queen.segments_timed ATTACH PARTITION queen.%I FOR VALUES FROM (%L) TO (%L)', n, lo, hi);
        RETURN false;
    END IF;
    EXECUTE format('DROP TABLE queen.%I', n);
    DELETE FROM queen.segment_ranges WHERE name = n;
    RETURN true;
END
$$;

-- Existing segments stay in segments_kept: retention deletes them one at
-- a time as before.
INSERT INTO queen.segments (partition_id, first_offset, last_offset, created_at, message_ids, frames, timed)
SELECT partition_id, first_offset, last_offset, created_at, message_ids, frames, false
  FROM queen.segments_0009;
DROP TABLE queen.segments_0009;
