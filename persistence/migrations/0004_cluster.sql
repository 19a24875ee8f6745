-- The cluster (SPEC.md §9): the fixed shard count, the brokers with their
-- heartbeats, and one expiring lease per shard. Ownership is an optimisation
-- for cache locality (the partition row lock stays the authority), so a wrong
-- or stale row here never changes a verdict. Every time is PostgreSQL's clock.

-- One row, written by the first broker that starts on this database (with
-- its configured count, default 64) and never changed after.
CREATE TABLE queen.cluster (
    singleton   boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    shard_count integer     NOT NULL CHECK (shard_count BETWEEN 1 AND 65536),
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- One row per broker process (a fresh id per start). A broker counts as live
-- while expires_at is ahead; rows long expired are deleted by the claims.
CREATE TABLE queen.brokers (
    id           uuid        PRIMARY KEY,
    http_url     text        NOT NULL DEFAULT '',
    started_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    heartbeat_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    expires_at   timestamptz NOT NULL
);

-- One row per shard, created with the cluster row. owner is NULL when the
-- shard is free (expires_at is then when it became free); a lease whose
-- expires_at has passed is free to claim even when owner is still set (its
-- broker stopped renewing).
CREATE TABLE queen.shard_leases (
    shard       integer     PRIMARY KEY,
    owner       uuid,
    acquired_at timestamptz,
    expires_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX shard_leases_owner ON queen.shard_leases (owner);
