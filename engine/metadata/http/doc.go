// Package http speaks Mooncake's HTTP metadata protocol
// (specs/mooncake.md §3.4): GET, PUT and DELETE of "<url>?key=<escaped key>",
// where only status 200 is success.
//
// Client is a metadata.KV over that protocol, used by the engine when the
// metadata connection string is an http:// or https:// URL. Server is an
// http.Handler that serves the protocol from memory, with an optional
// on-disk snapshot so that a restart keeps the registrations, and an
// optional TTL that drops entries their owner stopped re-publishing;
// cmd/kvferry-metadata runs it.
//
// Both are safe for concurrent use. A Client owns its idle connections and
// a Server its snapshot writer and expiry goroutine; each has a Close.
package http
