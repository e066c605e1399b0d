# -*- Python -*-
# The k3c lit suite: dialect, importer, driver tests (and, later, lowering,
# targets and end-to-end numerics). GPU tests are gated by REQUIRES: features.

import os
import subprocess
import sys

import lit.formats
from lit.llvm import llvm_config

config.name = "K3C"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.excludes = ["Inputs", "Unit", "Runtime", "CMakeLists.txt", "lit.cfg.py"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.k3c_obj_root, "test")

config.substitutions.append(("%models", os.path.join(config.k3c_src_root, "models")))
config.substitutions.append(("%python", sys.executable))
# test/install: the source and build trees, and lit itself.
config.substitutions.append(("%k3c_src_root", config.k3c_src_root))
config.substitutions.append(("%k3c_obj_root", config.k3c_obj_root))
config.substitutions.append(("%lit", os.path.join(config.llvm_tools_dir, "lit")))

llvm_config.with_system_environment(["HOME", "TMP", "TEMP", "CUDA_ROOT", "CUDA_HOME", "CUDA_PATH"])
# bench/roofline.py draws with matplotlib (Debian's python3-matplotlib).

if subprocess.run([sys.executable, "-c", "import matplotlib"],
                  capture_output=True).returncode == 0:
    config.available_features.add("matplotlib")

# GPU code generation needs the CUDA toolkit's ptxas (no GPU, no driver).
if os.path.exists("/usr/local/cuda/bin/ptxas"):
    config.available_features.add("ptxas")
# Running GPU code needs an NVIDIA GPU and its driver (the H200 machine).
if os.path.exists("/dev/nvidia0") and any(
        os.path.exists(os.path.join(d, "libcuda.so.1"))
        for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/local/cuda/compat")):
    config.available_features.add("cuda-gpu")
llvm_config.use_default_substitutions()
llvm_config.add_tool_substitutions(
    ["k3-opt", "k3c", "k3-run", "k3-weights", "k3-serving-check",
     "k3-linked-check", "k3-state-check", "k3-device-check"],
    [config.k3c_tools_dir])
# The NumPy reference and the comparison script need numpy; lit runs with
# the system python3 (Debian's python3-numpy).
config.substitutions.append(("%compare", sys.executable + " " + os.path.join(
    config.test_source_root, "e2e", "compare.py")))
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
