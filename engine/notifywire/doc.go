// Package notifywire is the codec of the notify RPC body
// (specs/mooncake.md §3.6): Mooncake's JSON object
// {"name": ..., "notify_msg": ...}, and kvferry's byte-exact form of it.
// It is pure data with no dependencies beyond the standard library, so its
// fuzz target runs in a small binary; the engine sends and serves it.
package notifywire
