-- Taken in a layout migration's transaction before migrate_older_brokers:
-- no broker heartbeat (INSERT or UPDATE of queen.brokers) registers between
-- the check and the commit of the new layout (SPEC.md §2). Heartbeats wait
-- for the migration; reads of the cluster view do not.
LOCK TABLE queen.brokers IN SHARE MODE
