-- The brokers for the cluster view, with how many live leases each holds and
-- what each advertises of its binary (release, revision, schema version,
-- layout generation; '' and 0 for a broker that predates them, migration
-- 0015).
SELECT b.id, b.http_url, b.started_at, b.heartbeat_at, b.expires_at,
       b.expires_at > clock_timestamp() AS live,
       (SELECT count(*) FROM queen.shard_leases l
        WHERE l.owner = b.id AND l.expires_at > clock_timestamp())::int AS shards,
       b.release, b.revision, b.schema_version, b.layout
FROM queen.brokers b
ORDER BY b.started_at, b.id
