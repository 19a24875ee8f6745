-- Drops a raw baseline table. {{table}} as in raw_create.sql.
DROP TABLE IF EXISTS {{table}}
