#!/usr/bin/env python3
"""PyTorch's own distributed test suite (torch.testing._internal.distributed.
distributed_test) against a backend, as PyTorch's test_distributed_spawn.py runs it:
BACKEND=mimatrix (a plugin, with the ddp and subgroup features) or BACKEND=gloo, WORLD_SIZE
ranks spawned per test. Arguments are unittest's (test names, -k patterns)."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the expecttest stand-in

# PyTorch's helpers read CI=true as PyTorch's own CI: they would write XML reports through
# xmlrunner, which Debian does not ship. This project's CI sets it for its own scripts.
os.environ.pop("CI", None)
os.environ.setdefault("BACKEND", "mimatrix")
os.environ.setdefault("WORLD_SIZE", "2")
if "TEMP_DIR" not in os.environ:
    os.environ["TEMP_DIR"] = tempfile.mkdtemp(prefix="mimatrix_suite_")

import torch.nn.parallel._replicated_tensor_ddp_utils as replicated  # noqa: E402

# The suite's DDP tests fail under Python 3.11 on the replicated-tensor path, for Gloo too.
replicated._set_ddp_with_replicated_tensor = lambda value: None

from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402

if os.environ["BACKEND"] == "mimatrix":
    import mimatrix_torch  # noqa: F401,E402  (registers the backend)

    for feature in ("plugin", "ddp", "subgroup"):
        DistTestCases.backend_feature[feature].add("mimatrix")

import logging  # noqa: E402

from torch.testing._internal.common_utils import run_tests  # noqa: E402

# The suite and DDP log at INFO between unittest's verbose lines, which are the record.
logging.disable(logging.INFO)
from torch.testing._internal.distributed.distributed_test import DistributedTest, TestDistBackend  # noqa: E402


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._spawn_processes()


if __name__ == "__main__":
    run_tests()
