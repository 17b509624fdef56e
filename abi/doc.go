// Package abi is the only place where C meets Go. It implements the
// functions of include/transfer_engine_c.h (Mooncake's Transfer Engine C
// API, exactly its return conventions, specs/mooncake.md §1) and of
// include/kvferry.h over the Go packages: the engine, the store client,
// the NIXL and TensorRT-LLM agents (agent/nixl, agent/trtllm) and the store
// completion queue (store/asyncq). It holds no logic of its own.
//
// Each public C function is a thin C definition (te_c.c) compiled against
// our headers, so a signature that drifts from the header fails to compile.
// It checks the fork guard and calls one hidden Go export (exports_te.go),
// which recovers panics, looks up the handle, converts C values and maps Go
// errors to the header's codes (codes.go). Handles are integers in a table,
// never Go pointers. Strings are copied before the call returns.
package abi
