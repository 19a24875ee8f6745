-- The span of the ranges a retention of r seconds asks for, in minutes:
-- the largest power of two not above r / 8 minutes, from 1 to 1024, so a
-- queue's retained time spans about 8 to 16 ranges and a range is dropped
-- at most one span after its newest row's retention. The ranges are made
-- with the span of the longest retention in use (segranges.go); 1 when r
-- is not positive.
CREATE OR REPLACE FUNCTION queen.segment_span_minutes(r float8) RETURNS int
    LANGUAGE sql IMMUTABLE
AS $$ SELECT CASE WHEN r IS NULL OR r < 960 THEN 1
                  ELSE least(1024, power(2, floor(log(2, (r / 480)::numeric)))::int) END $$;
