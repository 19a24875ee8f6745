-- Before the window probe (bundle_probe), for this transaction only: no
-- sequential scan of a time range of log_txn_hashes, even when its
-- statistics say it is tiny (a young range, or the DEFAULT partition,
-- analysed while nearly empty): the plan may be cached and reused once it
-- holds millions of rows. Every lookup has an index (log_txn_hashes_lookup,
-- primary keys). plan_end restores the setting.
SELECT set_config('enable_seqscan', 'off', true)
