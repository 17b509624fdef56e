// Package asyncq is an asynchronous completion queue over a store client: a
// fixed pool of workers runs submitted store calls, finished calls wait in
// a list until polled, and an eventfd becomes readable whenever completions
// wait, so an event loop (asyncio's add_reader) can wait for them without a
// thread per call.
//
// It is the Go side of kvferry.h's kvferry_store_queue_*; abi/ converts the
// C arguments, maps this package's sentinels to KVFERRY_ERR_* codes and
// completion errors to store codes (wire.CodeOf). The queue never sees a C
// type; the one piece of C memory it handles is the object of a GetAlloc
// job, allocated with C malloc (internal/cmem) and owned by whoever polls
// the completion.
//
// Ownership and lifetime: New starts the workers and creates the eventfd;
// Close stops submissions, waits for running calls (each bounded by the
// store's own timeouts), frees the data of unpolled completions and closes
// the eventfd. Every method is safe for concurrent use.
package asyncq
