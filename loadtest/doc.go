// Package loadtest is the load harness behind `queen loadtest`: producers over NATS, HTTP or raw COPY, the run report, and the post-run database audit (SPEC.md §12).
package loadtest
