-- The per-hash sidecar index in two levels (SPEC.md §2 storage budget, §7,
-- §8). Every per-hash row of log_txn_hashes cost about 184 bytes of WAL and
-- 143 bytes of database per stored message, the largest cost after the
-- payload: a heap row and a btree entry per hash, each a WAL record of its
-- own. Now:
--
--  * level 0: the time ranges of log_txn_hashes are UNLOGGED. A push still
--    writes one per-hash row (one index descent per incoming hash finds it,
--    whatever the window holds), but no WAL. A range lives until it closes
--    and is compacted, a few seconds after its upper bound.
--  * level 1: queen.hash_blocks, one table per compacted range (range
--    partitioned on lo), built in one statement from the range's log_txns
--    rows (which are logged: they are the authority) and dropped whole when
--    the range expires. A row holds the hashes of one bucket of the range
--    (the top `bits` bits of the hash; bits chosen so that a bucket holds
--    about 48 hashes) in three parallel arrays (one aggregation pass builds
--    all three, so positions agree): the hash, the covering log_txns row's first offset
--    and the hash's index in it: 28 bytes per hash. A lookup is one
--    primary-key descent per compacted range in the window, then
--    array_positions over about 48 uuids, then one log_txns primary-key
--    lookup per candidate that checks the hash at that index (so a hash of
--    another partition in the same bucket matches nothing).
--
-- An unlogged table is emptied when PostgreSQL recovers from a crash, and
-- is empty on a promoted standby. queen.sidecar_alive (unlogged too) lists
-- the level-0 ranges whose rows are complete; a crash empties it with
-- them. A lookup that needs a listed open range missing from it raises
-- SQLSTATE QS001 (the push answers failed, retryable) until the retention
-- loop has compacted the range from log_txns (a closed range) or re-filled
-- it from log_txns (the current one). queen.sidecar_ranges lists every
-- range: bits NULL while it is level 0, the bucket bits once compacted.

CREATE TABLE queen.sidecar_ranges (
    lo           timestamptz PRIMARY KEY,
    hi           timestamptz NOT NULL,
    bits         integer,
    compacted_at timestamptz
);

CREATE UNLOGGED TABLE queen.sidecar_alive (
    lo timestamptz PRIMARY KEY
);

CREATE TABLE queen.hash_blocks (
    lo     timestamptz NOT NULL,
    bucket bigint      NOT NULL,
    hashes uuid[]      NOT NULL,
    firsts bigint[]    NOT NULL,
    idxs   integer[]   NOT NULL,
    PRIMARY KEY (lo, bucket)
) PARTITION BY RANGE (lo);

-- The ranges that exist now (logged: they keep their rows across a crash)
-- are level 0 and complete.
INSERT INTO queen.sidecar_ranges (lo, hi)
SELECT b[1]::timestamptz, b[2]::timestamptz
  FROM (SELECT regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \(''([^'']+)''\) TO \(''([^'']+)''\)') AS b
          FROM pg_inherits i
          JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = 'queen.log_txn_hashes'::regclass
           AND c.relname <> 'log_txn_hashes_default') r
 WHERE b IS NOT NULL;
INSERT INTO queen.sidecar_alive (lo) SELECT lo FROM queen.sidecar_ranges;

-- A new level-0 range: unlogged, listed, alive. True when it created it.
CREATE OR REPLACE FUNCTION queen.sidecar_create_range(lo timestamptz, hi timestamptz) RETURNS boolean
    LANGUAGE plpgsql
AS $$
DECLARE
    n text := queen.sidecar_range_name(lo);
BEGIN
    IF to_regclass(format('queen.%I', n)) IS NOT NULL THEN
        RETURN false;
    END IF;
    EXECUTE format('CREATE UNLOGGED TABLE queen.%I PARTITION OF queen.log_txn_hashes FOR VALUES FROM (%L) TO (%L) WITH (autovacuum_enabled = false)', n, lo, hi);
    INSERT INTO queen.sidecar_ranges (lo, hi) VALUES (lo, hi)
        ON CONFLICT DO NOTHING;
    INSERT INTO queen.sidecar_alive (lo) VALUES (lo) ON CONFLICT DO NOTHING;
    RETURN true;
END
$$;

-- False when the level-0 range starting at lo is alive; raises QS001 when
-- it is not (a crash emptied it). One function, so that no plan can run the
-- raise before the test.
CREATE FUNCTION queen.sidecar_lost(lo timestamptz, alive boolean) RETURNS boolean
    LANGUAGE plpgsql
AS $$
BEGIN
    IF alive THEN
        RETURN false;
    END IF;
    RAISE EXCEPTION 'sidecar range from % is being rebuilt after a database restart', lo
        USING ERRCODE = 'QS001';
END
$$;

-- The name of the level-1 table of the range starting at lo.
CREATE FUNCTION queen.hash_blocks_name(lo timestamptz) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT
AS $$ SELECT 'hash_blocks_' || to_char(lo AT TIME ZONE 'UTC', 'YYYYMMDD"_"HH24MISS') $$;

-- Compacts the closed range [lo, hi): waits for the writers of its level-0
-- table (EXCLUSIVE lock: readers go on), builds its level-1 table from the
-- range's log_txns rows, attaches it, marks the range compacted and drops
-- the level-0 table, all in the caller's transaction (a short lock_timeout:
-- the DROP needs log_txn_hashes' lock for a moment). A push stamped inside
-- the range that had not inserted yet fails (its range is gone) or, once
-- the range is dropped, lands in the DEFAULT partition, which every lookup
-- reads. Returns the hashes compacted, or -1 when the range is not listed
-- as level 0.
CREATE FUNCTION queen.sidecar_compact(lo timestamptz, hi timestamptz) RETURNS bigint
    LANGUAGE plpgsql
AS $$
DECLARE
    n    text := queen.sidecar_range_name(lo);
    b    text := queen.hash_blocks_name(lo);
    cnt  bigint;
    k    integer;
    l0   boolean;
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
    -- it) from the range's log_txns rows (about 1.2 µs a hash). Either way
    -- the rows are projected narrow before the sort (OFFSET 0): a sort of
    -- the unprojected join carried each log_txns row's hashes per hash.
    l0 := to_regclass(format('queen.%I', n)) IS NOT NULL
          AND EXISTS (SELECT 1 FROM queen.sidecar_alive a WHERE a.lo = sidecar_compact.lo);
    IF l0 THEN
        EXECUTE format('SELECT count(*) FROM queen.%I', n) INTO cnt;
    ELSE
        SELECT COALESCE(sum(length(t.hashes) / 16), 0) INTO cnt
          FROM queen.log_txns t
         WHERE t.created_at >= lo AND t.created_at < hi;
    END IF;
    k := CASE WHEN cnt <= 48 THEN 0 ELSE least(30, ceil(log(2, cnt / 48.0))::int) END;
    -- One core, pushes keep the other (a parallel build of millions of
    -- hashes took both and halved the push rate while it ran); grouping by
    -- a sort, which spills less than hashing under the default work_mem.
    PERFORM set_config('max_parallel_workers_per_gather', '0', true);
    PERFORM set_config('enable_hashagg', 'off', true);
    EXECUTE format('CREATE TABLE queen.%I (LIKE queen.hash_blocks) WITH (autovacuum_enabled = false)', b);
    IF l0 THEN
        EXECUTE format($q$
            INSERT INTO queen.%I (lo, bucket, hashes, firsts, idxs)
            SELECT $1, e.bucket, array_agg(e.hash), array_agg(e.first), array_agg(e.idx)
              FROM (SELECT x.hash, x.segment AS first, (x."offset" - x.segment)::int AS idx,
                           ('x' || substr(x.hash::text, 1, 8))::bit(32)::bigint >> (32 - $2) AS bucket
                      FROM queen.%I x
                    OFFSET 0) e
             GROUP BY e.bucket
        $q$, b, n) USING lo, k;
    ELSE
        EXECUTE format($q$
            INSERT INTO queen.%I (lo, bucket, hashes, firsts, idxs)
            SELECT $1, e.bucket, array_agg(e.hash), array_agg(e.first), array_agg(e.idx)
              FROM (SELECT encode(substring(t.hashes FROM g.i * 16 + 1 FOR 16), 'hex')::uuid AS hash,
                           t.first_offset AS first, g.i AS idx,
                           ('x' || encode(substring(t.hashes FROM g.i * 16 + 1 FOR 4), 'hex'))::bit(32)::bigint >> (32 - $3) AS bucket
                      FROM queen.log_txns t
                     CROSS JOIN LATERAL generate_series(0, length(t.hashes) / 16 - 1) AS g (i)
                     WHERE t.created_at >= $1 AND t.created_at < $2
                    OFFSET 0) e
             GROUP BY e.bucket
        $q$, b) USING lo, hi, k;
    END IF;
    EXECUTE format('ALTER TABLE queen.%I ADD PRIMARY KEY (lo, bucket)', b);
    EXECUTE format('ALTER TABLE queen.%I ADD CONSTRAINT %I CHECK (lo >= %L AND lo < %L)', b, b || '_bounds', lo, hi);
    EXECUTE format('ALTER TABLE queen.hash_blocks ATTACH PARTITION queen.%I FOR VALUES FROM (%L) TO (%L)', b, lo, hi);
    UPDATE queen.sidecar_ranges r SET bits = k, compacted_at = clock_timestamp() WHERE r.lo = sidecar_compact.lo;
    IF to_regclass(format('queen.%I', n)) IS NOT NULL THEN
        EXECUTE format('DROP TABLE queen.%I', n);
    END IF;
    DELETE FROM queen.sidecar_alive a WHERE a.lo = sidecar_compact.lo;
    RETURN cnt;
END
$$;

-- Re-fills the level-0 range [lo, hi) from its log_txns rows after a crash
-- emptied it (the current range, or one ahead of it) and lists it alive.
-- Rows pushed since the crash are there already: a hash twice in level 0
-- is harmless (a lookup takes the lowest offset). Returns the rows written.
CREATE FUNCTION queen.sidecar_refill(lo timestamptz, hi timestamptz) RETURNS bigint
    LANGUAGE plpgsql
AS $$
DECLARE
    cnt bigint;
BEGIN
    INSERT INTO queen.log_txn_hashes (partition_id, hash, "offset", segment, created_at)
    SELECT t.partition_id, encode(substring(t.hashes FROM g.i * 16 + 1 FOR 16), 'hex')::uuid,
           t.first_offset + g.i, t.first_offset, t.created_at
      FROM queen.log_txns t
     CROSS JOIN LATERAL generate_series(0, length(t.hashes) / 16 - 1) AS g (i)
     WHERE t.created_at >= lo AND t.created_at < hi;
    GET DIAGNOSTICS cnt = ROW_COUNT;
    INSERT INTO queen.sidecar_alive (lo) VALUES (lo) ON CONFLICT DO NOTHING;
    RETURN cnt;
END
$$;

-- Drops the range [lo, hi) once none of its hashes counts any more (no
-- log_txns row older than hi is left): its level-1 table, or its level-0
-- table when it was never compacted, and its listing. False when it does
-- not drop. The check runs again after the DROP holds its locks.
CREATE FUNCTION queen.sidecar_expire(lo timestamptz, hi timestamptz) RETURNS boolean
    LANGUAGE plpgsql
AS $$
DECLARE
    n text := CASE WHEN (SELECT r.bits FROM queen.sidecar_ranges r WHERE r.lo = sidecar_expire.lo) IS NULL
                   THEN queen.sidecar_range_name(lo) ELSE queen.hash_blocks_name(lo) END;
BEGIN
    IF to_regclass(format('queen.%I', n)) IS NOT NULL THEN
        EXECUTE format('DROP TABLE queen.%I', n);
    END IF;
    IF EXISTS (SELECT 1 FROM queen.log_txns t WHERE t.created_at < hi) THEN
        RAISE EXCEPTION 'sidecar range % is still in use', n USING ERRCODE = 'object_in_use';
    END IF;
    DELETE FROM queen.sidecar_ranges r WHERE r.lo = sidecar_expire.lo;
    DELETE FROM queen.sidecar_alive a WHERE a.lo = sidecar_expire.lo;
    RETURN true;
END
$$;

-- True when every level-0 range ending after `after` is alive; raises QS001
-- naming the first that is not (a crash emptied it). A caller that has
-- checked once for a statement passes checked to queen.sidecar_find.
CREATE FUNCTION queen.sidecar_assert_alive(after timestamptz) RETURNS boolean
    LANGUAGE plpgsql STABLE
AS $$
DECLARE
    lost timestamptz;
BEGIN
    SELECT r.lo INTO lost
      FROM queen.sidecar_ranges r
     WHERE r.bits IS NULL AND r.hi > after
       AND NOT EXISTS (SELECT 1 FROM queen.sidecar_alive a WHERE a.lo = r.lo)
     ORDER BY r.lo
     LIMIT 1;
    IF lost IS NOT NULL THEN
        PERFORM queen.sidecar_lost(lost, false);
    END IF;
    RETURN true;
END
$$;

-- Where a hash h of partition p may be (SPEC.md §3, §4, §13): its sidecar
-- entries created after `after` and within [since, until], each as the
-- offset, the first offset of its segment and its created_at, from level 0
-- (one index descent per range, the DEFAULT partition included) and level 1
-- (one primary-key descent per compacted range in the span). An entry
-- counts only while its log_txns row exists (level 1 reads the hash back
-- from it). Raises QS001 when a level-0 range the span needs was emptied by
-- a crash and is not rebuilt yet, unless checked (the caller ran
-- queen.sidecar_assert_alive for the statement). The hash's bucket in a
-- compacted range is its top `bits` bits.
CREATE FUNCTION queen.sidecar_find(p uuid, h uuid, after timestamptz, since timestamptz, until timestamptz, checked boolean)
    RETURNS TABLE ("offset" bigint, segment bigint, created_at timestamptz)
    LANGUAGE sql STABLE
AS $$
    SELECT x."offset", x.segment, x.created_at
      FROM queen.log_txn_hashes x
     WHERE x.partition_id = p
       AND x.hash = h
       AND x.created_at > after
       AND x.created_at >= since
       AND x.created_at <= until
       AND EXISTS (SELECT 1 FROM queen.log_txns t
                    WHERE t.partition_id = x.partition_id AND t.first_offset = x.segment
                   OFFSET 0)
       -- (The raise sits in the WHERE: an EXISTS never evaluates its
       -- select list.)
       AND (checked OR NOT EXISTS (SELECT 1
                         FROM queen.sidecar_ranges r
                        WHERE r.bits IS NULL AND r.hi > after AND r.hi > since AND r.lo <= until
                          AND queen.sidecar_lost(r.lo, EXISTS (SELECT 1 FROM queen.sidecar_alive a WHERE a.lo = r.lo))))
    UNION ALL
    SELECT t.first_offset + k.idxs[i], t.first_offset, t.created_at
      FROM queen.sidecar_ranges r
     CROSS JOIN LATERAL (
        SELECT k.hashes, k.firsts, k.idxs
          FROM queen.hash_blocks k
         WHERE k.lo = r.lo
           AND k.bucket = ('x' || substr(h::text, 1, 8))::bit(32)::bigint >> (32 - r.bits)
        OFFSET 0
     ) k
     CROSS JOIN LATERAL unnest(array_positions(k.hashes, h)) AS i
     CROSS JOIN LATERAL (
        SELECT t.first_offset, t.created_at
          FROM queen.log_txns t
         WHERE t.partition_id = p AND t.first_offset = k.firsts[i]
           AND substring(t.hashes FROM k.idxs[i] * 16 + 1 FOR 16) = uuid_send(h)
        OFFSET 0
     ) t
     WHERE r.bits IS NOT NULL AND r.hi > after AND r.hi > since AND r.lo <= until
       AND t.created_at > after AND t.created_at >= since AND t.created_at <= until
$$;

-- Replaced by queen.sidecar_expire.
DROP FUNCTION queen.sidecar_drop_range(text, timestamptz);
