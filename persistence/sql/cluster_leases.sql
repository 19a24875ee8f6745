-- Every shard's lease for the cluster view and the routers, with
-- PostgreSQL's clock (leases are measured on it) and the shard count.
SELECT l.shard, l.owner, l.acquired_at, l.expires_at,
       l.owner IS NOT NULL AND l.expires_at > clock_timestamp() AS live,
       clock_timestamp() AS now, c.shard_count
FROM queen.shard_leases l
CROSS JOIN queen.cluster c
ORDER BY l.shard
