// Package clientstats is what the load harness's clients (producers and
// consumers) saw over time: requests, errors by kind and items answered
// failed, in Bucket-long (100 ms) buckets from the run's start, so the
// chaos report can tell the stretches around each fault from the rest
// (report.ClientErrors). Producers and consumers record into it; the chaos
// room reads its windows.
package clientstats
