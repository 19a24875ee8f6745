// Package transport is the broker's front door: the NATS micro service
// "queen" (SPEC.md §11), the HTTP gateway on the Queen routes (SPEC.md §3, §6),
// and the Go client over NATS. It decodes and validates requests (with
// transport/wire) before anything is written, admits them, maps errors to
// status codes and sends the replies wire encodes; it never touches SQL.
package transport
