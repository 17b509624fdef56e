// Package redis is a metadata.KV on Redis (specs/mooncake.md §3.5), used
// by the engine when the metadata connection string is
// "redis://[user:password@]host[:port][/db]" or "rediss://…" (TLS).
//
// Keys and values are Mooncake's: plain string keys ("mooncake/ram/<name>",
// "mooncake/rpc_meta/<name>") holding the JSON bytes, written with SET,
// read with GET and removed with DEL, in the database the URL (or
// MC_REDIS_DB_INDEX) selects, after AUTH when a password is given. So a
// Mooncake node and a kvferry node on one Redis read each other's entries.
//
// Unlike Mooncake, which writes keys without expiry, every key a KV writes
// carries a time to live (KeyTTL) that a background loop renews, so the
// entries of an engine that dies vanish after KeyTTL. The same loop finds
// keys that are gone while their owner lives (Redis restarted without a
// snapshot, FLUSHALL, an eviction) and writes them again. Readers see
// ordinary string keys.
//
// A KV owns its go-redis client (a pool of connections, re-dialed when
// broken) and its refresh goroutine; Close stops the goroutine and closes
// the client.
package redis
