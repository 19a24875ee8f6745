-- One broker's renew tick, in one statement (like a leader lease): heartbeat
-- broker $1 (HTTP URL $2) for $3 milliseconds, advertising its release $4,
-- revision $5, schema version $6 and layout generation $7 (SPEC.md §2: a
-- layout migration is refused while a live broker advertises an older
-- layout), then keep at most its fair share of shards,
-- ceil(shard_count / live brokers):
--   renewed  its leases up to the fair share (lowest shard numbers first),
--            extended by $3 ms;
--   released the surplus over the fair share (more brokers joined), freed;
--   taken    free or expired shards of others up to the fair share, lowest
--            first, skipping rows another broker is claiming right now.
-- A lease this broker lost (another took it after it expired) is not renewed:
-- every UPDATE re-checks owner = $1 on the row's latest version. Broker rows
-- expired for more than an hour are deleted. Returns the shards the broker
-- holds afterwards, each with taken = true when newly claimed.
WITH me AS (
    INSERT INTO queen.brokers (id, http_url, expires_at, release, revision, schema_version, layout)
    VALUES ($1, $2, clock_timestamp() + $3::bigint * interval '1 millisecond', $4, $5, $6, $7)
    ON CONFLICT (id) DO UPDATE
        SET http_url = excluded.http_url, heartbeat_at = clock_timestamp(), expires_at = excluded.expires_at,
            release = excluded.release, revision = excluded.revision,
            schema_version = excluded.schema_version, layout = excluded.layout
), gone AS (
    DELETE FROM queen.brokers
    WHERE expires_at < clock_timestamp() - interval '1 hour' AND id <> $1
), share AS (
    SELECT ceil(c.shard_count::numeric / (1 + count(b.id)))::int AS fair
    FROM queen.cluster c
    LEFT JOIN queen.brokers b ON b.expires_at > clock_timestamp() AND b.id <> $1
    GROUP BY c.shard_count
), held AS (
    SELECT shard, row_number() OVER (ORDER BY shard) AS rn
    FROM queen.shard_leases
    WHERE owner = $1
), renewed AS (
    UPDATE queen.shard_leases l
    SET expires_at = clock_timestamp() + $3::bigint * interval '1 millisecond'
    FROM held, share
    WHERE l.shard = held.shard AND held.rn <= share.fair AND l.owner = $1
    RETURNING l.shard
), released AS (
    UPDATE queen.shard_leases l
    SET owner = NULL, acquired_at = NULL, expires_at = clock_timestamp()
    FROM held, share
    WHERE l.shard = held.shard AND held.rn > share.fair AND l.owner = $1
    RETURNING l.shard
), free AS (
    SELECT l.shard
    FROM queen.shard_leases l
    WHERE (l.owner IS NULL OR l.expires_at <= clock_timestamp()) AND l.owner IS DISTINCT FROM $1
    ORDER BY l.shard
    LIMIT greatest(0, (SELECT fair FROM share) - (SELECT count(*) FROM held))
    FOR UPDATE SKIP LOCKED
), taken AS (
    UPDATE queen.shard_leases l
    SET owner = $1, acquired_at = clock_timestamp(), expires_at = clock_timestamp() + $3::bigint * interval '1 millisecond'
    FROM free
    WHERE l.shard = free.shard
    RETURNING l.shard
)
SELECT shard, false AS taken FROM renewed
UNION ALL
SELECT shard, true FROM taken
ORDER BY 1
