-- The time ranges of log_txn_hashes are insert-only and dropped whole
-- (SPEC.md §7): autovacuum on them reads every new page of a range that
-- grows by about a million rows a minute at full load, competing with
-- pushes for the machine, and frees nothing. They are created, and the
-- existing ones altered, with autovacuum_enabled = false. PostgreSQL still
-- vacuums them if their transaction ids near wraparound; a range lives for
-- the largest floor over all queues plus one span. The DEFAULT partition,
-- where retention deletes rows, keeps autovacuum.
CREATE OR REPLACE FUNCTION queen.sidecar_create_range(lo timestamptz, hi timestamptz) RETURNS boolean
    LANGUAGE plpgsql
AS $$
DECLARE
    n text := queen.sidecar_range_name(lo);
BEGIN
    IF to_regclass(format('queen.%I', n)) IS NOT NULL THEN
        RETURN false;
    END IF;
    EXECUTE format('CREATE TABLE queen.%I PARTITION OF queen.log_txn_hashes FOR VALUES FROM (%L) TO (%L) WITH (autovacuum_enabled = false)', n, lo, hi);
    RETURN true;
END
$$;

DO $$
DECLARE
    n text;
BEGIN
    FOR n IN
        SELECT c.relname
          FROM pg_inherits i
          JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = 'queen.log_txn_hashes'::regclass
           AND c.relname <> 'log_txn_hashes_default'
    LOOP
        EXECUTE format('ALTER TABLE queen.%I SET (autovacuum_enabled = false)', n);
    END LOOP;
END
$$;
