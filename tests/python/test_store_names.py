"""kvferry.store is split into one private module per concern (issue 33):
every name that ``from kvferry.store import X``, ``from mooncake.store
import X`` and ``from kvferry import X`` gave before the split still
imports, and MooncakeDistributedStore(Async) keeps every public method."""

import importlib
import unittest

import _util  # noqa: F401  (puts python/ on sys.path)

# The non-private names of kvferry.store before the split (its __all__,
# then the names it imported for its own use), and the private
# module-level helpers that Mooncake's binding has too.
STORE_ALL = [
    "MooncakeDistributedStore",
    "MooncakeDistributedStoreAsync",
    "ReplicateConfig",
    "SoftPinAction",
    "ObjectDataType",
    "ReplicaStatus",
    "ReplicaDescriptor",
    "MemoryDescriptor",
    "DiskDescriptor",
    "TaskType",
    "TaskStatus",
    "QueryTaskResponse",
    "Descriptor",
    "BufferHandle",
    "ErrorCode",
    "MooncakeHostMemAllocator",
    # issue 42
    "ParallelAxis",
    "TensorParallelism",
    "ReadTarget",
    "MooncakeDistributedNoFRegister",
    "get_alloc_func_addr",
    "get_free_func_addr",
    "bind_to_numa_node",
    "BufferPool",
    "BufferLease",
    "BufferLeaseView",
]
STORE_OTHER = ["ReplicateConfigC", "byref", "c_char_p", "c_int", "c_int64", "c_size_t",
               "c_uint64", "c_void_p", "lib", "log"]
MOONCAKE_HELPERS = ["_deserialize_tensor", "_serialize_tensor", "_tensor_metadata_size"]

KVFERRY_NAMES = ["ErrorCode", "LibraryNotFound", "TransferError", "api_version", "error_name",
                 "library_path", "library_version", "metrics_text", "__version__", "errors",
                 "store", "tensor", "engine", "allocator"]

# The public attributes of MooncakeDistributedStore before the split; the
# async class has the same (its async_<name> come from __getattr__).
STORE_METHODS = """
VERSION_ANY alloc_from_mem_pool batch_get_buffer batch_get_into batch_get_into_multi_buffers
batch_get_replica_desc batch_get_tensor batch_get_tensor_into batch_get_tensor_into_cuda
batch_get_tensor_with_tp batch_get_tensor_with_tp_into batch_is_exist batch_pub_tensor
batch_pub_tensor_with_tp batch_put_from batch_put_from_multi_buffers batch_put_tensor
batch_put_tensor_from batch_put_tensor_with_tp batch_put_tensor_with_tp_from batch_remove
batch_upsert_from batch_upsert_pub_tensor batch_upsert_tensor batch_upsert_tensor_from close
create_copy_task create_move_task get get_batch get_buffer get_hostname get_into
get_replica_desc get_size get_tensor get_tensor_into get_tensor_into_cuda get_tensor_versioned
get_tensor_with_tp get_tensor_with_tp_into get_versioned health_check init_all is_exist
last_error master_address pub_tensor pub_tensor_versioned pub_tensor_with_tp put put_batch
put_from put_from_with_metadata put_parts put_tensor put_tensor_from put_tensor_with_tp
put_tensor_with_tp_from put_versioned query_task register_buffer remove remove_all
remove_by_regex setup setup_dummy unregister_buffer upsert upsert_batch upsert_from upsert_parts
upsert_pub_tensor upsert_tensor upsert_tensor_from
""".split()


def import_from(module, name):
    """Run ``from module import name`` and return the object."""
    return getattr(__import__(module, fromlist=[name]), name)


class Names(unittest.TestCase):
    def test_kvferry_store(self):
        store = importlib.import_module("kvferry.store")
        self.assertEqual(store.__all__, STORE_ALL)
        for name in STORE_ALL + STORE_OTHER + MOONCAKE_HELPERS:
            with self.subTest(name=name):
                self.assertIsNotNone(import_from("kvferry.store", name))

    def test_star_import(self):
        ns = {}
        exec("from kvferry.store import *", ns)
        self.assertEqual(sorted(set(ns) - {"__builtins__"}), sorted(STORE_ALL))

    def test_mooncake_store(self):
        store = importlib.import_module("kvferry.store")
        for name in STORE_ALL + MOONCAKE_HELPERS:
            with self.subTest(name=name):
                self.assertIs(import_from("mooncake.store", name), getattr(store, name))
        self.assertIs(import_from("mooncake.async_store", "MooncakeDistributedStoreAsync"),
                      store.MooncakeDistributedStoreAsync)

    def test_kvferry(self):
        importlib.import_module("kvferry.store")
        for name in KVFERRY_NAMES:
            with self.subTest(name=name):
                self.assertIsNotNone(import_from("kvferry", name))

    def test_methods(self):
        store = importlib.import_module("kvferry.store")
        for cls in (store.MooncakeDistributedStore, store.MooncakeDistributedStoreAsync):
            for name in STORE_METHODS:
                with self.subTest(cls=cls.__name__, name=name):
                    self.assertTrue(hasattr(cls, name))
        self.assertTrue(issubclass(store.MooncakeDistributedStoreAsync,
                                   store.MooncakeDistributedStore))
        self.assertEqual(store.MooncakeDistributedStore.VERSION_ANY, (1 << 64) - 1)
        # async_<name> still resolves for a method of every concern.
        s = store.MooncakeDistributedStoreAsync()
        try:
            for name in ("put", "get_into", "batch_put_from_multi_buffers", "put_tensor",
                         "get_tensor_with_tp", "put_versioned", "query_task"):
                with self.subTest(name="async_" + name):
                    self.assertTrue(callable(getattr(s, "async_" + name)))
        finally:
            s.close()


if __name__ == "__main__":
    unittest.main()
