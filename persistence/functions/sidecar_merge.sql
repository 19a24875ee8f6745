-- Writes the next step of the merged index (queen.hash_merged, migration
-- 0027) of the closed level-1 table `wide`: the table's buckets (on its own
-- bits) from queen.hash_merged_alive.next on, as many as hold about
-- `budget` hashes by the table's shape (at least one), read from the rows
-- of its listed ranges; in the caller's transaction (a short lock_timeout:
-- the first step creates and attaches the table's partition of
-- hash_merged, dropping one a crash emptied, and needs hash_merged's lock
-- for a moment). The step that writes the last bucket lists the index
-- complete, and from then on lookups read it (queen.sidecar_find).
--
-- Closed: a newer level-1 table exists, so no range joins this one
-- (queen.sidecar_compact only extends the newest). Merged only with two
-- ranges or more (one range reads one row already). The merged index's
-- bucket bits are the table's plus enough for its ranges and one more, so
-- a merged row holds about half as many hashes as a range's row did (about
-- 9 bytes a hash: no row is TOASTed); each bucket of the table maps to a
-- contiguous run of them, so a step writes whole merged rows. A range that
-- expires later stays in the index (the lookup reads its range row and
-- skips it below the table's lo, as it did).
--
-- Returns the hashes this step indexed and whether the index is complete;
-- no row when there is nothing to do (the table is gone, not closed, holds
-- one range, or its index is complete).
CREATE OR REPLACE FUNCTION queen.sidecar_merge(wide timestamptz, budget bigint)
    RETURNS TABLE (hashes bigint, complete boolean)
    LANGUAGE plpgsql
AS $$
DECLARE
    m     text := 'hash_merged_' || substr(queen.hash_blocks_name(wide), length('hash_blocks_') + 1);
    tlo   timestamptz;
    tk    integer;
    tn    integer;
    k     integer;
    los   timestamptz[];
    nx    bigint;
    done  boolean;
    step  bigint;
    cnt   bigint;
BEGIN
    SELECT t.lo, t.bits, t.ranges INTO tlo, tk, tn
      FROM queen.sidecar_tables t WHERE t.wide = sidecar_merge.wide FOR UPDATE;
    IF NOT FOUND OR tn < 2
       OR NOT EXISTS (SELECT 1 FROM queen.sidecar_tables t WHERE t.wide > sidecar_merge.wide)
       OR to_regclass(format('queen.%I', queen.hash_blocks_name(wide))) IS NULL THEN
        RETURN;
    END IF;
    SELECT a.bits, a.los, a.next, a.complete INTO k, los, nx, done
      FROM queen.hash_merged_alive a WHERE a.wide = sidecar_merge.wide FOR UPDATE;
    IF FOUND AND done THEN
        RETURN;
    END IF;
    IF NOT FOUND THEN
        SELECT array_agg(r.lo ORDER BY r.lo) INTO los
          FROM queen.sidecar_ranges r WHERE r.wide = sidecar_merge.wide AND r.bits IS NOT NULL AND r.lo >= tlo;
        IF los IS NULL OR cardinality(los) < 2 OR cardinality(los) > 256 THEN
            RETURN;
        END IF;
        k := least(30, tk + ceil(log(2, cardinality(los)))::int + 1);
        nx := 0;
        -- A partition a crash emptied (no longer listed) goes first.
        IF to_regclass(format('queen.%I', m)) IS NOT NULL THEN
            EXECUTE format('DROP TABLE queen.%I', m);
        END IF;
        EXECUTE format('CREATE UNLOGGED TABLE queen.%I (LIKE queen.hash_merged) WITH (autovacuum_enabled = false)', m);
        EXECUTE format('ALTER TABLE queen.%I ADD PRIMARY KEY (wide, bucket)', m);
        EXECUTE format('ALTER TABLE queen.%I ADD CONSTRAINT %I CHECK (wide = %L)', m, m || '_wide', wide);
        EXECUTE format('ALTER TABLE queen.hash_merged ATTACH PARTITION queen.%I FOR VALUES IN (%L)', m, wide);
        INSERT INTO queen.hash_merged_alive AS a (wide, bits, los, next, complete)
        VALUES (sidecar_merge.wide, k, los, 0, false);
    END IF;
    -- A bucket of the table's rows holds about 128 hashes a range (48 to
    -- 192: queen.sidecar_compact).
    step := greatest(1, budget / (128 * cardinality(los)));
    PERFORM set_config('max_parallel_workers_per_gather', '0', true);
    PERFORM set_config('enable_hashagg', 'off', true);
    -- A hash's print is its first 8 bytes, its bucket its top k bits; both
    -- aggregates of a group read its rows in the same order.
    EXECUTE format($q$
        WITH ins AS (
            INSERT INTO queen.%I (wide, bucket, prints, ranges)
            SELECT $1, e.bucket, array_agg(e.print), string_agg(e.range, ''::bytea)
              FROM (SELECT ('x' || replace(substr(h::text, 1, 18), '-', ''))::bit(64)::bigint AS print,
                           ('x' || substr(h::text, 1, 8))::bit(32)::bigint >> (32 - $2) AS bucket,
                           set_byte('\x00'::bytea, 0, array_position($3, k.lo) - 1) AS range
                      FROM queen.hash_blocks k
                     CROSS JOIN LATERAL unnest(k.hashes) AS h
                     WHERE k.wide = $1 AND k.bucket >= $4 AND k.bucket < $5 AND k.lo = ANY ($3)
                    OFFSET 0) e
             GROUP BY e.bucket
            RETURNING cardinality(prints) AS n)
        SELECT COALESCE(sum(n), 0)::bigint FROM ins
    $q$, m) INTO cnt USING wide, k, los, nx, nx + step;
    nx := nx + step;
    done := nx >= (1::bigint << tk);
    UPDATE queen.hash_merged_alive a SET next = nx, complete = done WHERE a.wide = sidecar_merge.wide;
    hashes := cnt;
    complete := done;
    RETURN NEXT;
END
$$;
