package abi

/*
#include <stddef.h>
#include "transfer_engine_c.h"
static size_t kvf_off_source(void) { return offsetof(struct transfer_request, source); }
static size_t kvf_off_target_id(void) { return offsetof(struct transfer_request, target_id); }
static size_t kvf_off_target_offset(void) { return offsetof(struct transfer_request, target_offset); }
static size_t kvf_off_length(void) { return offsetof(struct transfer_request, length); }
*/
import "C"

// cLayout reports the C compiler's view of the structs Go mirrors, for the
// layout test (cgo cannot appear in _test.go files).
func cLayout() map[string]uintptr {
	return map[string]uintptr{
		"sizeof(transfer_request)": uintptr(C.sizeof_struct_transfer_request),
		"offsetof(source)":         uintptr(C.kvf_off_source()),
		"offsetof(target_id)":      uintptr(C.kvf_off_target_id()),
		"offsetof(target_offset)":  uintptr(C.kvf_off_target_offset()),
		"offsetof(length)":         uintptr(C.kvf_off_length()),
		"sizeof(notify_msg)":       uintptr(C.sizeof_struct_notify_msg),
		"sizeof(transfer_status)":  uintptr(C.sizeof_struct_transfer_status),
		"sizeof(buffer_entry)":     uintptr(C.sizeof_struct_buffer_entry),
	}
}
