-- Ranges of segments_timed whose concurrent detach was interrupted
-- (pg_inherits.inhdetachpending): FINALIZE completes them.
SELECT c.relname::text
  FROM pg_inherits i
  JOIN pg_class c ON c.oid = i.inhrelid
 WHERE i.inhparent = 'queen.segments_timed'::regclass AND i.inhdetachpending
