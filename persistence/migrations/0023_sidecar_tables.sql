-- Level 1 of the hash sidecar in wider tables (issues 40 and 42, SPEC.md §8:
-- the cold probe independent of the window's length). Until now every
-- compacted range (one minute by default) was a table of its own,
-- range-partitioned on lo, and a lookup of a hash the cache does not vouch
-- for cost one primary-key descent, heap fetch and block unpacking per range
-- of the window (60 for an hour), and the generic plan of the probe locked
-- every one of those tables and their indexes at each execution.
--
-- Now a level-1 table holds the blocks of up to 16 contiguous compacted
-- ranges (queen.sidecar_compact chooses: as many as keep the table's time
-- span within a quarter of the longest window, so it outlives its oldest
-- range by at most that), all bucketed on the same number of bits:
--
--  * queen.hash_blocks is list-partitioned on `wide`, the lo of the first
--    range of its table, and keyed (wide, bucket, lo): a lookup is one
--    descent per table, then the table's rows of that bucket, one per range.
--  * queen.sidecar_tables lists the tables: first range's lo (wide), the
--    span [lo, hi) of their listed ranges, the bucket bits and the count of
--    ranges compacted into it.
--  * queen.sidecar_ranges.wide names the table holding a compacted range.
--
-- A range that expires leaves its blocks in its table until the table's last
-- range expires (a DELETE would write WAL and free nothing until a vacuum);
-- the table's lo moves to its oldest listed range, and lookups skip the
-- rows below it, so an entry still counts exactly while its range is listed.
--
-- The compacted ranges that exist become one-range tables: each is detached,
-- given the column (a constant default: the catalog only) and the new key
-- (an index build over its rows, about one per 48 hashes), and attached to
-- the new parent (a scan of its rows, which checks `wide`).
--
-- Not a layout migration: the functions that read and write level 1
-- (functions/sidecar_*.sql) are applied with it, and brokers of the release
-- before call them and read no level-1 table themselves. Until the new
-- bodies are applied (right after this commits, by the same Migrate) a
-- compaction of an older body fails (no `wide`) and is retried.
ALTER TABLE queen.hash_blocks RENAME TO hash_blocks_0022;

CREATE TABLE queen.hash_blocks (
    lo     timestamptz NOT NULL,
    bucket bigint      NOT NULL,
    hashes uuid[]      NOT NULL,
    firsts bigint[]    NOT NULL,
    idxs   integer[]   NOT NULL,
    parts  uuid[]      NOT NULL,
    stamps timestamptz[] NOT NULL,
    wide   timestamptz NOT NULL,
    PRIMARY KEY (wide, bucket, lo)
) PARTITION BY LIST (wide);

CREATE TABLE queen.sidecar_tables (
    wide   timestamptz PRIMARY KEY,
    lo     timestamptz NOT NULL,
    hi     timestamptz NOT NULL,
    bits   integer     NOT NULL,
    ranges integer     NOT NULL
);

ALTER TABLE queen.sidecar_ranges ADD COLUMN wide timestamptz;

DO $$
DECLARE
    r record;
    n text;
    k text;
BEGIN
    FOR r IN SELECT s.lo, s.hi, s.bits FROM queen.sidecar_ranges s WHERE s.bits IS NOT NULL ORDER BY s.lo
    LOOP
        n := 'hash_blocks_' || to_char(r.lo AT TIME ZONE 'UTC', 'YYYYMMDD"_"HH24MISS');
        IF to_regclass(format('queen.%I', n)) IS NULL THEN
            CONTINUE;
        END IF;
        EXECUTE format('ALTER TABLE queen.hash_blocks_0022 DETACH PARTITION queen.%I', n);
        EXECUTE format('ALTER TABLE queen.%I ADD COLUMN wide timestamptz NOT NULL DEFAULT %L', n, r.lo);
        FOR k IN SELECT c.conname FROM pg_constraint c
                  WHERE c.conrelid = format('queen.%I', n)::regclass AND c.contype = 'p'
        LOOP
            EXECUTE format('ALTER TABLE queen.%I DROP CONSTRAINT %I', n, k);
        END LOOP;
        EXECUTE format('ALTER TABLE queen.%I ADD PRIMARY KEY (wide, bucket, lo)', n);
        EXECUTE format('ALTER TABLE queen.hash_blocks ATTACH PARTITION queen.%I FOR VALUES IN (%L)', n, r.lo);
        INSERT INTO queen.sidecar_tables (wide, lo, hi, bits, ranges) VALUES (r.lo, r.lo, r.hi, r.bits, 1);
        UPDATE queen.sidecar_ranges s SET wide = r.lo WHERE s.lo = r.lo;
    END LOOP;
END
$$;

DROP TABLE queen.hash_blocks_0022;
