// Package handle hands out the integer handles C callers hold instead of Go
// pointers (DESIGN.md: "C sees integer handles").
//
// A Table maps handle values to Go objects. Values carry a tag in their high
// bits, which makes them non-canonical addresses: a caller that dereferences
// one faults at once instead of corrupting memory. Ids are never reused, so
// a removed handle stays invalid for the life of its table. The zero value
// of a Table is empty and ready to use; 0 is never a valid handle.
//
// abi/ keeps its tables of engines, stores and agents here, and agent/nixl
// its per-agent tables of memory descriptors and transfer requests, whose
// values C callers hold directly.
package handle
