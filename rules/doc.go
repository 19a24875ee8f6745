// Package rules holds the broker's decisions as pure functions over plain
// values: what an ack does to a consumer group's row (SPEC.md §4). The
// persistence layer reads the rows under their locks, calls these, and
// writes what they decide; so the rules are table-tested here without
// PostgreSQL, and the SQL stays about reading and writing.
package rules
