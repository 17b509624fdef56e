"""Mooncake's names against ours (issue 42): every public method of
Mooncake's MooncakeDistributedStore and every module-level name of its
mooncake.store, pinned at kvcache-ai/Mooncake 3b5a594 in testdata/ (names
only), must exist on kvferry's, with no exceptions: a name newly missing
fails."""

import os
import unittest

import _util  # noqa: F401  (puts python/ on sys.path)

import mooncake.store as mc
from kvferry.store import MooncakeDistributedStore, MooncakeDistributedStoreAsync

HERE = os.path.dirname(os.path.abspath(__file__))


def pinned(name):
    with open(os.path.join(HERE, "testdata", name)) as f:
        return [ln.strip() for ln in f if ln.strip() and not ln.startswith("#")]


class MooncakeNames(unittest.TestCase):
    def test_methods(self):
        names = pinned("mooncake_store_methods.txt")
        self.assertGreater(len(names), 90)
        for cls in (MooncakeDistributedStore, MooncakeDistributedStoreAsync):
            for name in names:
                with self.subTest(cls=cls.__name__, name=name):
                    self.assertTrue(callable(getattr(cls, name, None)), "%s.%s is missing" % (cls.__name__, name))

    def test_module(self):
        for name in pinned("mooncake_store_module.txt"):
            with self.subTest(name=name):
                self.assertTrue(hasattr(mc, name), "mooncake.store.%s is missing" % name)


if __name__ == "__main__":
    unittest.main()
