-- After the window probe: the rest of the transaction plans as usual
-- (probe_plan_begin).
SELECT set_config('enable_seqscan', 'on', true)
