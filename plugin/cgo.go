package main

// The C++ shims in this directory (NIXL backend plugin, TensorRT-LLM
// transfer agent) are compiled by cgo with these flags. They include only
// our headers in ../include and call the flat C API; -fvisibility=hidden
// keeps everything but the entry points marked default out of the dynamic
// symbol table (the version script exports.map has the final say).

/*
#cgo CXXFLAGS: -std=c++20 -O2 -fvisibility=hidden -fvisibility-inlines-hidden -Wall -Werror -I${SRCDIR}/../include -I${SRCDIR}
#cgo CFLAGS: -O2 -fvisibility=hidden -I${SRCDIR}/../include
#cgo LDFLAGS: -lstdc++
*/
import "C"
