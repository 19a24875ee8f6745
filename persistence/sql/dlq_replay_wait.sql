-- A DLQ replay's transaction waits for another replay of the same dead
-- letters as long as its caller's context allows (SPEC.md §13), not the
-- pool's lock_timeout: the other replay holds its locks across a push.
SET LOCAL lock_timeout = 0
