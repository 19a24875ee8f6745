-- Compacts the closed range [lo, hi): waits for the writers of its level-0
-- table (EXCLUSIVE lock: readers go on), writes its level-1 blocks (of
-- self-contained entries: hash, partition, created_at, segment and index,
-- migration 0017, packed 28 bytes an entry with the partition's number,
-- migration 0024: queen.hash_entry_pack; a partition deleted meanwhile has
-- no entry) from its level-0 rows, or from the hashes of the range's
-- segments when a crash emptied level 0, writes each partition's
-- fingerprints of the range (queen.hash_prints, migration 0021: what a hash
-- cache reads back for segments retention removed inside the window) and
-- lists them complete, marks the range compacted and drops the level-0
-- table, all in the caller's transaction (a short lock_timeout: the DROP
-- needs log_txn_hashes' lock for a moment). A push stamped inside the range
-- that had not inserted yet fails (its range is gone) or, once the range is
-- dropped, lands in the DEFAULT partition, which every lookup reads.
--
-- The blocks go to the newest level-1 table (migration 0023) when the range
-- continues it (the table ends at lo), the table holds fewer ranges than a
-- quarter of the longest sidecar floor (window or completed retention) in
-- ranges of this length, at most 16, and the range needs no more than 2
-- bits over the table's (a bucket then holds at most about 4 x 48 hashes);
-- it is bucketed on the table's bits. Otherwise the range starts a table of
-- its own, bucketed on its own bits (a bucket of about 48 hashes). Returns
-- the hashes compacted, or -1 when the range is not listed as level 0.
CREATE OR REPLACE FUNCTION queen.sidecar_compact(lo timestamptz, hi timestamptz) RETURNS bigint
    LANGUAGE plpgsql
AS $$
DECLARE
    n    text := queen.sidecar_range_name(lo);
    b    text;
    cnt  bigint;
    k    integer;
    l0   boolean;
    tw   timestamptz;
    thi  timestamptz;
    tk   integer;
    tn   integer;
    w    timestamptz := lo;
    most integer;
BEGIN
    PERFORM 1 FROM queen.sidecar_ranges r WHERE r.lo = sidecar_compact.lo AND r.bits IS NULL FOR UPDATE;
    IF NOT FOUND THEN
        RETURN -1;
    END IF;
    IF to_regclass(format('queen.%I', n)) IS NOT NULL THEN
        EXECUTE format('LOCK TABLE queen.%I IN EXCLUSIVE MODE', n);
    END IF;
    -- From the level-0 table when it is complete (its rows carry the hash
    -- as a uuid: no unpacking, about 0.7 µs a hash), else (a crash emptied
    -- it) from the range's segments (retention leaves them until the range
    -- is compacted). Either way the rows are projected narrow before the
    -- sort (OFFSET 0): a sort of the unprojected join carried each
    -- segment's hashes per hash.
    l0 := to_regclass(format('queen.%I', n)) IS NOT NULL
          AND EXISTS (SELECT 1 FROM queen.sidecar_alive a WHERE a.lo = sidecar_compact.lo);
    IF l0 THEN
        EXECUTE format('SELECT count(*) FROM queen.%I', n) INTO cnt;
    ELSE
        SELECT COALESCE(sum(length(t.hashes) / 16), 0) INTO cnt
          FROM queen.segments t
         WHERE t.created_at >= lo AND t.created_at < hi;
    END IF;
    k := CASE WHEN cnt <= 48 THEN 0 ELSE least(30, ceil(log(2, cnt / 48.0))::int) END;
    -- One core, pushes keep the other (a parallel build of millions of
    -- hashes took both and halved the push rate while it ran); grouping by
    -- a sort, which spills less than hashing under the default work_mem.
    PERFORM set_config('max_parallel_workers_per_gather', '0', true);
    PERFORM set_config('enable_hashagg', 'off', true);
    most := least(16, greatest(1, floor(queen.sidecar_floor() / (4 * extract(epoch FROM hi - lo)))::int));
    SELECT s.wide, s.hi, s.bits, s.ranges INTO tw, thi, tk, tn
      FROM queen.sidecar_tables s ORDER BY s.wide DESC LIMIT 1 FOR UPDATE;
    -- A merged table (migration 0027) takes no more ranges: its index
    -- lists the ones it had.
    IF FOUND AND thi = lo AND tn < most AND k <= tk + 2
       AND NOT EXISTS (SELECT 1 FROM queen.hash_merged_alive a WHERE a.wide = tw) THEN
        IF to_regclass(format('queen.%I', queen.hash_blocks_name(tw))) IS NOT NULL THEN
            w := tw;
            k := tk;
        END IF;
    END IF;
    b := queen.hash_blocks_name(w);
    IF w = lo THEN
        EXECUTE format('CREATE TABLE queen.%I (LIKE queen.hash_blocks) WITH (autovacuum_enabled = false)', b);
    END IF;
    IF l0 THEN
        EXECUTE format($q$
            INSERT INTO queen.%I (lo, bucket, hashes, entries, wide)
            SELECT $1, e.bucket, array_agg(e.hash), string_agg(e.entry, ''::bytea), $3
              FROM (SELECT x.hash, queen.hash_entry_pack(n.num, x.segment, (x."offset" - x.segment)::int, x.created_at) AS entry,
                           ('x' || substr(x.hash::text, 1, 8))::bit(32)::bigint >> (32 - $2) AS bucket
                      FROM queen.%I x
                      JOIN queen.partitions n ON n.id = x.partition_id
                    OFFSET 0) e
             GROUP BY e.bucket
        $q$, b, n) USING lo, k, w;
    ELSE
        EXECUTE format($q$
            INSERT INTO queen.%I (lo, bucket, hashes, entries, wide)
            SELECT $1, e.bucket, array_agg(e.hash), string_agg(e.entry, ''::bytea), $4
              FROM (SELECT encode(substring(t.hashes FROM g.i * 16 + 1 FOR 16), 'hex')::uuid AS hash,
                           queen.hash_entry_pack(t.partition_num, t.first_offset, g.i, t.created_at) AS entry,
                           ('x' || encode(substring(t.hashes FROM g.i * 16 + 1 FOR 4), 'hex'))::bit(32)::bigint >> (32 - $3) AS bucket
                      FROM queen.segments t
                     CROSS JOIN LATERAL generate_series(0, length(t.hashes) / 16 - 1) AS g (i)
                     WHERE t.created_at >= $1 AND t.created_at < $2
                    OFFSET 0) e
             GROUP BY e.bucket
        $q$, b) USING lo, hi, k, w;
    END IF;
    -- The fingerprints: a partition's hashes' first four bytes, grouped by
    -- hashing (a few thousand partitions: the groups fit in work_mem).
    PERFORM set_config('enable_hashagg', 'on', true);
    PERFORM set_config('work_mem', '64MB', true);
    IF l0 THEN
        EXECUTE format($q$
            INSERT INTO queen.hash_prints (lo, partition_id, prints)
            SELECT $1, x.partition_id, string_agg(substring(uuid_send(x.hash) FROM 1 FOR 4), ''::bytea)
              FROM queen.%I x
             GROUP BY x.partition_id
        $q$, n) USING lo;
    ELSE
        INSERT INTO queen.hash_prints (lo, partition_id, prints)
        SELECT sidecar_compact.lo, n.id, string_agg(substring(t.hashes FROM g.i * 16 + 1 FOR 4), ''::bytea)
          FROM queen.segments t
          JOIN queen.partitions n ON n.num = t.partition_num
         CROSS JOIN LATERAL generate_series(0, length(t.hashes) / 16 - 1) AS g (i)
         WHERE t.created_at >= sidecar_compact.lo AND t.created_at < sidecar_compact.hi
         GROUP BY n.id;
    END IF;
    INSERT INTO queen.hash_prints_alive (lo) VALUES (sidecar_compact.lo) ON CONFLICT DO NOTHING;
    IF w = lo THEN
        -- A new table: keyed and checked once filled (a bulk index build),
        -- then attached (the CHECK spares the attach its scan).
        EXECUTE format('ALTER TABLE queen.%I ADD PRIMARY KEY (wide, bucket, lo)', b);
        EXECUTE format('ALTER TABLE queen.%I ADD CONSTRAINT %I CHECK (wide = %L)', b, b || '_wide', w);
        EXECUTE format('ALTER TABLE queen.hash_blocks ATTACH PARTITION queen.%I FOR VALUES IN (%L)', b, w);
        INSERT INTO queen.sidecar_tables (wide, lo, hi, bits, ranges) VALUES (w, lo, hi, k, 1);
    ELSE
        UPDATE queen.sidecar_tables s SET hi = sidecar_compact.hi, ranges = s.ranges + 1 WHERE s.wide = w;
    END IF;
    UPDATE queen.sidecar_ranges r SET bits = k, wide = w, compacted_at = clock_timestamp() WHERE r.lo = sidecar_compact.lo;
    IF to_regclass(format('queen.%I', n)) IS NOT NULL THEN
        EXECUTE format('DROP TABLE queen.%I', n);
    END IF;
    DELETE FROM queen.sidecar_alive a WHERE a.lo = sidecar_compact.lo;
    RETURN cnt;
END
$$;
