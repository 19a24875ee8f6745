-- Refreshes the planner's statistics of queen.partitions (see
-- persistence/stats.go): run after bulk creations of partitions, so the
-- statements that join it (the load test's audit, the lock and probe of a
-- bundle) are planned for its real size, not for the empty table autovacuum
-- last saw (it looks again only every autovacuum_naptime, a minute by
-- default).
ANALYZE queen.partitions
