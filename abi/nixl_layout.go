package abi

/*
#include <stddef.h>
#include "kvferry.h"
enum {
    kvf_nixl_off_len = offsetof(kvferry_nixl_desc_t, len),
    kvf_nixl_off_dev = offsetof(kvferry_nixl_desc_t, dev_id),
    kvf_nixl_off_md = offsetof(kvferry_nixl_desc_t, md),
    kvf_nixl_off_msg = offsetof(kvferry_nixl_notif_t, msg),
};
*/
import "C"

// nixlCLayout reports the C compiler's view of the NIXL support structs and
// constants of kvferry.h, for the tests (cgo cannot appear in _test.go).
func nixlCLayout() map[string]int {
	return map[string]int{
		"sizeof(kvferry_nixl_desc_t)":  int(C.sizeof_kvferry_nixl_desc_t),
		"offsetof(len)":                int(C.kvf_nixl_off_len),
		"offsetof(dev_id)":             int(C.kvf_nixl_off_dev),
		"offsetof(md)":                 int(C.kvf_nixl_off_md),
		"sizeof(kvferry_nixl_notif_t)": int(C.sizeof_kvferry_nixl_notif_t),
		"offsetof(msg)":                int(C.kvf_nixl_off_msg),
		"IN_PROG":                      int(C.KVFERRY_NIXL_IN_PROG),
		"SUCCESS":                      int(C.KVFERRY_NIXL_SUCCESS),
		"ERR_NOT_POSTED":               int(C.KVFERRY_NIXL_ERR_NOT_POSTED),
		"ERR_INVALID_PARAM":            int(C.KVFERRY_NIXL_ERR_INVALID_PARAM),
		"ERR_BACKEND":                  int(C.KVFERRY_NIXL_ERR_BACKEND),
		"ERR_NOT_FOUND":                int(C.KVFERRY_NIXL_ERR_NOT_FOUND),
		"ERR_MISMATCH":                 int(C.KVFERRY_NIXL_ERR_MISMATCH),
		"ERR_NOT_ALLOWED":              int(C.KVFERRY_NIXL_ERR_NOT_ALLOWED),
		"ERR_REPOST_ACTIVE":            int(C.KVFERRY_NIXL_ERR_REPOST_ACTIVE),
		"ERR_UNKNOWN":                  int(C.KVFERRY_NIXL_ERR_UNKNOWN),
		"ERR_NOT_SUPPORTED":            int(C.KVFERRY_NIXL_ERR_NOT_SUPPORTED),
		"ERR_REMOTE_DISCONNECT":        int(C.KVFERRY_NIXL_ERR_REMOTE_DISCONNECT),
		"ERR_CANCELED":                 int(C.KVFERRY_NIXL_ERR_CANCELED),
		"DRAM":                         int(C.KVFERRY_NIXL_DRAM),
		"VRAM":                         int(C.KVFERRY_NIXL_VRAM),
		"READ":                         int(C.KVFERRY_NIXL_READ),
		"WRITE":                        int(C.KVFERRY_NIXL_WRITE),
	}
}
