-- The per-hash sidecar index in time ranges (SPEC.md §7): log_txn_hashes is
-- range-partitioned on created_at, so retention drops whole expired ranges
-- instead of deleting one row (one index descent) per hash, and a push's
-- inserts touch only the current range's small btree (fewer full-page images
-- in the WAL after a checkpoint). Ranges are [lo, lo + span) with lo a
-- multiple of the span since the epoch (UTC), named
-- log_txn_hashes_YYYYMMDD_HHMMSS after lo; the broker creates them ahead of
-- time (persistence/ranges.go, QUEEN_SIDECAR_RANGE, default 5 min). The
-- DEFAULT partition is a safety net: a row whose range does not exist yet
-- lands there instead of failing its push.
--
-- A per-hash row counts only while its segment's log_txns row exists; the
-- log_txns rows stay the authority of the sidecar's retention.
ALTER TABLE queen.log_txn_hashes RENAME TO log_txn_hashes_0005;
ALTER INDEX queen.log_txn_hashes_lookup RENAME TO log_txn_hashes_0005_lookup;

CREATE TABLE queen.log_txn_hashes (
    partition_id uuid        NOT NULL,
    hash         uuid        NOT NULL,
    "offset"     bigint      NOT NULL,
    segment      bigint      NOT NULL,
    created_at   timestamptz NOT NULL
) PARTITION BY RANGE (created_at);
CREATE INDEX log_txn_hashes_lookup ON queen.log_txn_hashes (partition_id, hash) INCLUDE ("offset", segment, created_at);
CREATE TABLE queen.log_txn_hashes_default PARTITION OF queen.log_txn_hashes DEFAULT;

-- The name of the range starting at lo.
CREATE FUNCTION queen.sidecar_range_name(lo timestamptz) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT
AS $$ SELECT 'log_txn_hashes_' || to_char(lo AT TIME ZONE 'UTC', 'YYYYMMDD"_"HH24MISS') $$;

-- Creates the range [lo, hi) unless a table of its name exists; true when it
-- created it. Callers set a short lock_timeout first (the statement takes
-- the parent's lock, which pushes need too).
CREATE FUNCTION queen.sidecar_create_range(lo timestamptz, hi timestamptz) RETURNS boolean
    LANGUAGE plpgsql
AS $$
DECLARE
    n text := queen.sidecar_range_name(lo);
BEGIN
    IF to_regclass(format('queen.%I', n)) IS NOT NULL THEN
        RETURN false;
    END IF;
    EXECUTE format('CREATE TABLE queen.%I PARTITION OF queen.log_txn_hashes FOR VALUES FROM (%L) TO (%L)', n, lo, hi);
    RETURN true;
END
$$;

-- Drops range n, a partition of log_txn_hashes other than the DEFAULT one
-- whose upper bound is hi, when no log_txns row older than hi is left (so
-- every row in it counts for nothing any more); false when it does not
-- drop. Callers set a short lock_timeout first. The check runs again after
-- the DROP has locked the parent, so no push or configure slips between.
CREATE FUNCTION queen.sidecar_drop_range(n text, hi timestamptz) RETURNS boolean
    LANGUAGE plpgsql
AS $$
BEGIN
    IF n = 'log_txn_hashes_default' OR NOT EXISTS (
        SELECT 1 FROM pg_inherits i
          JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = 'queen.log_txn_hashes'::regclass AND c.relname = n) THEN
        RETURN false;
    END IF;
    EXECUTE format('DROP TABLE queen.%I', n);
    IF EXISTS (SELECT 1 FROM queen.log_txns t WHERE t.created_at < hi) THEN
        RAISE EXCEPTION 'sidecar range % is still in use', n USING ERRCODE = 'object_in_use';
    END IF;
    RETURN true;
END
$$;

-- Existing rows move into 5-minute ranges (the default span) covering them;
-- rows whose log_txns row is gone count for nothing and are left behind.
DO $$
DECLARE
    b bigint;
BEGIN
    FOR b IN
        SELECT DISTINCT floor(extract(epoch FROM h.created_at) / 300)::bigint
          FROM queen.log_txn_hashes_0005 h
         WHERE EXISTS (SELECT 1 FROM queen.log_txns t WHERE t.partition_id = h.partition_id AND t.first_offset = h.segment)
    LOOP
        PERFORM queen.sidecar_create_range(to_timestamp(b * 300), to_timestamp((b + 1) * 300));
    END LOOP;
END
$$;
INSERT INTO queen.log_txn_hashes (partition_id, hash, "offset", segment, created_at)
SELECT h.partition_id, h.hash, h."offset", h.segment, h.created_at
  FROM queen.log_txn_hashes_0005 h
 WHERE EXISTS (SELECT 1 FROM queen.log_txns t WHERE t.partition_id = h.partition_id AND t.first_offset = h.segment);
DROP TABLE queen.log_txn_hashes_0005;
