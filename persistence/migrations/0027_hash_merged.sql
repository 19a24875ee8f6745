-- A merged index of each closed level-1 table (issues 40 and 42, SPEC.md §8:
-- the cold probe independent of the window's length). A level-1 table
-- (migration 0023) holds up to 16 contiguous compacted ranges, one row per
-- bucket and range, so a lookup the cache does not narrow read one row per
-- range of the window: 60 rows for an hour, and a cluster whose shards move
-- (each move leaves partitions to hydrate, whose pushes probe in full) slowed
-- down as the window filled.
--
-- Once a table is closed (a newer one exists, so no range joins it any
-- more), queen.sidecar_merge writes its merged index: one row per bucket of
-- more bits, holding the first 8 bytes of each hash of the table's listed
-- ranges (`prints`, as a bigint) and, a byte per hash in the same order, the
-- range it is in (`ranges`, an index into queen.hash_merged_alive.los). A
-- lookup then reads one merged row per closed table, and the range row that
-- holds the hash's entry only for a print that matches (a duplicate, or
-- about one false match in 2^64 / hashes): queen.sidecar_find.
--
-- UNLOGGED, like level 0 and the fingerprints: no WAL (the index is a copy
-- of what the logged level-1 rows hold). A crash or a promoted standby
-- empties it, and queen.hash_merged_alive with it, which lists the tables
-- whose merged index is being written or complete, with its bucket bits and
-- ranges: a table not listed complete is read range by range, as before,
-- until the upkeep has merged it (again).
--
-- queen.hash_merged is list-partitioned on `wide` like queen.hash_blocks,
-- a partition per merged table (hash_merged_YYYYMMDD_HHMMSS, unlogged),
-- dropped with its level-1 table (queen.sidecar_expire).
--
-- Not a layout migration: the functions that read and write it
-- (functions/sidecar_*.sql) are applied with it, and brokers of the release
-- before call them; they do not merge, so a table waits for a broker of this
-- release to merge it and is read range by range until then.
CREATE TABLE queen.hash_merged (
    wide   timestamptz NOT NULL,
    bucket bigint      NOT NULL,
    prints bigint[]    NOT NULL,
    ranges bytea       NOT NULL,
    PRIMARY KEY (wide, bucket)
) PARTITION BY LIST (wide);

CREATE UNLOGGED TABLE queen.hash_merged_alive (
    wide     timestamptz   PRIMARY KEY,
    bits     integer       NOT NULL,
    los      timestamptz[] NOT NULL,
    -- The table's buckets (on its own bits) merged so far, from 0: the
    -- merge goes in steps of a bounded number of hashes, each its own
    -- transaction; complete once all are.
    next     bigint        NOT NULL,
    complete boolean       NOT NULL
);
