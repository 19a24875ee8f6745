-- After statements run with enable_seqscan off (probe_plan_begin,
-- consume_plan_begin) inside a longer transaction: the rest of the
-- transaction plans as usual.
SELECT set_config('enable_seqscan', 'on', true), set_config('enable_bitmapscan', 'on', true),
       set_config('plan_cache_mode', 'auto', true)
