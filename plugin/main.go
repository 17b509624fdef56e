// Command plugin is built with -buildmode=c-shared into libkvferry.so, the
// one shared object kvferry ships. It links the C ABI (package abi) and the
// thin C++ shims for NIXL and TensorRT-LLM that live in this directory; the
// linker version script exports.map exports only the public API.
package main

import (
	_ "github.com/kvferry/kvferry/abi" // the exported C functions
)

func main() {}
