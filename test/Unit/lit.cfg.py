# -*- Python -*-
# The GoogleTest unit tests, run through lit.

import os

import lit.formats

config.name = "K3C-Unit"
config.suffixes = []
config.test_source_root = os.path.join(config.k3c_obj_root, "test", "Unit")
config.test_exec_root = config.test_source_root
config.test_format = lit.formats.GoogleTest(".", "Tests")
