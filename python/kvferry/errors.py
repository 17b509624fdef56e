"""Error codes of the transfer engine and the store, with Mooncake's values.

Calls return these codes as plain ints, exactly where Mooncake's Python
binding returns ints (specs/mooncake.md §1.3, §6.6); exceptions are raised
only for arguments of the wrong type or shape, as pybind11 would.
"""

import enum

__all__ = ["ErrorCode", "TransferError", "error_name"]


class ErrorCode(enum.IntEnum):
    """Store ErrorCode (mooncake-store types.h): 0 or negative."""

    OK = 0
    INTERNAL_ERROR = -1
    BUFFER_OVERFLOW = -10
    SHARD_INDEX_OUT_OF_RANGE = -100
    SEGMENT_NOT_FOUND = -101
    SEGMENT_ALREADY_EXISTS = -102
    CLIENT_NOT_FOUND = -103
    NO_AVAILABLE_HANDLE = -200
    INVALID_VERSION = -300
    INVALID_KEY = -400
    WRITE_FAIL = -500
    INVALID_PARAMS = -600
    ILLEGAL_CLIENT = -601
    INVALID_WRITE = -700
    INVALID_READ = -701
    INVALID_REPLICA = -702
    REPLICA_IS_NOT_READY = -703
    OBJECT_NOT_FOUND = -704
    OBJECT_ALREADY_EXISTS = -705
    OBJECT_HAS_LEASE = -706
    LEASE_EXPIRED = -707
    OBJECT_HAS_REPLICATION_TASK = -708
    OBJECT_NO_REPLICATION_TASK = -709
    REPLICA_NOT_FOUND = -710
    REPLICA_ALREADY_EXISTS = -711
    REPLICA_IS_GONE = -712
    REPLICA_NOT_IN_LOCAL_MEMORY = -713
    OBJECT_REPLICA_BUSY = -714
    TRANSFER_FAIL = -800
    CHECKSUM_MISMATCH = -801
    RPC_FAIL = -900
    RPC_TIMEOUT = -901
    ETCD_OPERATION_ERROR = -1000
    ETCD_KEY_NOT_EXIST = -1001
    ETCD_TRANSACTION_FAIL = -1002
    ETCD_CTX_CANCELLED = -1003
    UNAVAILABLE_IN_CURRENT_STATUS = -1010
    UNAVAILABLE_IN_CURRENT_MODE = -1011
    NOT_SUPPORTED = -1012
    FILE_NOT_FOUND = -1100
    FILE_OPEN_FAIL = -1101
    FILE_READ_FAIL = -1102
    FILE_WRITE_FAIL = -1103
    FILE_INVALID_BUFFER = -1104
    FILE_LOCK_FAIL = -1105
    FILE_INVALID_HANDLE = -1106
    BUCKET_NOT_FOUND = -1200
    BUCKET_ALREADY_EXISTS = -1201
    TASK_NOT_FOUND = -1400
    TASK_PENDING_LIMIT_EXCEEDED = -1401
    JOB_NOT_FOUND = -1402


class TransferError(enum.IntEnum):
    """Transfer engine ERR_* codes (Mooncake include/error.h) and kvferry's
    additions (include/kvferry.h): 0 or negative."""

    OK = 0
    INVALID_ARGUMENT = -1
    TOO_MANY_REQUESTS = -2
    ADDRESS_NOT_REGISTERED = -3
    BATCH_BUSY = -4
    DEVICE_NOT_FOUND = -6
    ADDRESS_OVERLAPPED = -7
    FORKED = -10
    DNS = -101
    SOCKET = -102
    MALFORMED_JSON = -103
    REJECT_HANDSHAKE = -104
    METADATA = -200
    ENDPOINT = -201
    CONTEXT = -202
    NOT_IMPLEMENTED = -303
    TIMEOUT = -400
    CANCELED = -401
    TRANSFER = -402
    CLOSED = -403
    INTERNAL = -999


def error_name(code, store=True):
    """Return Mooncake's name of a store (or, with store=False, engine) code."""
    table = ErrorCode if store else TransferError
    try:
        return table(int(code)).name
    except ValueError:
        return "UNKNOWN(%d)" % int(code)
