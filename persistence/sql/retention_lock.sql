-- Tries the session advisory lock that makes one broker at a time run the
-- retention loop (SPEC.md §7). Held until retention_unlock or the session
-- ends, so a broker that dies or loses its connection lets another take over.
SELECT pg_try_advisory_lock(7307011042981448)
