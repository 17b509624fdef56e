// Package fabric is kvferry's one binding of libfabric: a thin C shim
// (shim.c) that opens libfabric.so.1 with dlopen at run time (never at link
// time, so the library loads on hosts without libfabric) and Go wrappers
// over it. The shim is compiled against our own declaration of the
// libfabric ABI (fabric_abi.h, compared with libfabric's headers by
// layout_test.go), so building needs no libfabric headers. The calls that
// libfabric's headers make static inline (fi_domain, fi_endpoint,
// fi_mr_regattr, fi_read, fi_write, fi_cq_read, fi_cq_readerr, ...) are
// written out in the shim and reach the provider through the objects' ops
// tables. The package holds no logic: the efa transport drives it.
//
// KVFERRY_LIBFABRIC_LIB names another library to open.
package fabric
