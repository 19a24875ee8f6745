// Package transport is the broker's front door, the server side only: the
// NATS micro service "queen" (SPEC.md §11) and the HTTP gateway on the Queen
// routes (SPEC.md §3, §6, §13). It decodes and validates requests (with
// transport/wire) before anything is written, admits them against the
// in-flight budget, maps errors to status codes and sends the replies wire
// encodes; it never touches SQL.
//
// The rooms around it: transport/wire holds what both sides speak (subjects,
// request and reply shapes, the error decoder); transport/client is the Go
// client, which this package never imports (nor does the client import
// this one); transport/console holds the web console's files.
package transport
