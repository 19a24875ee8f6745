-- Level-1 sidecar entries packed (issue 42: bytes per message, dense or
-- spread). A level-1 block row held each hash's entry in four parallel
-- arrays: its partition as a uuid (16 bytes), its segment's first offset
-- (8), its index in the segment (4) and the segment's created_at (8), plus
-- an array header (about 24 bytes) each: about 58 bytes a hash with the
-- hash itself, written to the WAL once by the compaction and kept for the
-- window. Now:
--
--  * queen.partitions.num, a bigint from an identity (never reused, so an
--    entry names one partition for as long as it lives, a partition deleted
--    and created again included), stands for the partition in an entry;
--  * a block row keeps `hashes` (uuid[]: array_positions finds a hash) and
--    `entries`, one bytea of 28 bytes a hash in the same order (number 8,
--    first offset 8, index 4, created_at as timestamptz_send's microseconds
--    8; queen.hash_entry_pack writes one, queen.hash_entry reads one back):
--    about 45 bytes a hash.
--
-- The level-1 tables that exist are rewritten in place, one at a time: each
-- is read into a new table of the new shape (entries of partitions deleted
-- since are left out: nothing can look them up), which replaces it under
-- the same name, key, check and list value. The sidecar's level 1 is
-- bounded by the longest window (README, Retention): the rewrite writes
-- about that much, once.
--
-- Not a layout migration: the functions that read and write level 1
-- (functions/sidecar_*.sql, hash_entry*.sql) are applied right after it by
-- the same Migrate, and brokers of the release before call them and read
-- no level-1 table themselves. Until the new bodies are applied a lookup of
-- an older body fails (its columns are gone): the push is answered
-- `failed`, retryable, never a verdict from half a sidecar.
ALTER TABLE queen.partitions ADD COLUMN num bigint GENERATED ALWAYS AS IDENTITY;
ALTER TABLE queen.partitions ADD CONSTRAINT partitions_num_key UNIQUE (num);

ALTER TABLE queen.hash_blocks RENAME TO hash_blocks_0023;

CREATE TABLE queen.hash_blocks (
    lo      timestamptz NOT NULL,
    bucket  bigint      NOT NULL,
    hashes  uuid[]      NOT NULL,
    entries bytea       NOT NULL,
    wide    timestamptz NOT NULL,
    PRIMARY KEY (wide, bucket, lo)
) PARTITION BY LIST (wide);

DO $$
DECLARE
    w timestamptz;
    n text;
    o text;
BEGIN
    FOR w IN SELECT t.wide FROM queen.sidecar_tables t ORDER BY t.wide
    LOOP
        n := 'hash_blocks_' || to_char(w AT TIME ZONE 'UTC', 'YYYYMMDD"_"HH24MISS');
        IF to_regclass(format('queen.%I', n)) IS NULL THEN
            CONTINUE;
        END IF;
        o := n || '_0023';
        EXECUTE format('ALTER TABLE queen.%I RENAME TO %I', n, o);
        EXECUTE format('CREATE TABLE queen.%I (LIKE queen.hash_blocks) WITH (autovacuum_enabled = false)', n);
        EXECUTE format($q$
            INSERT INTO queen.%I (lo, bucket, hashes, entries, wide)
            SELECT k.lo, k.bucket, x.hashes, x.entries, k.wide
              FROM queen.%I k
             CROSS JOIN LATERAL (
                SELECT array_agg(u.h ORDER BY u.o) AS hashes,
                       string_agg(int8send(p.num) || int8send(u.f) || int4send(u.i) || timestamptz_send(u.s), ''::bytea ORDER BY u.o) AS entries
                  FROM unnest(k.hashes, k.firsts, k.idxs, k.parts, k.stamps) WITH ORDINALITY AS u (h, f, i, pt, s, o)
                  JOIN queen.partitions p ON p.id = u.pt
             ) x
             WHERE x.hashes IS NOT NULL
        $q$, n, o);
        EXECUTE format('DROP TABLE queen.%I', o);
        EXECUTE format('ALTER TABLE queen.%I ADD PRIMARY KEY (wide, bucket, lo)', n);
        EXECUTE format('ALTER TABLE queen.%I ADD CONSTRAINT %I CHECK (wide = %L)', n, n || '_wide', w);
        EXECUTE format('ALTER TABLE queen.hash_blocks ATTACH PARTITION queen.%I FOR VALUES IN (%L)', n, w);
    END LOOP;
END
$$;

DROP TABLE queen.hash_blocks_0023;
