# -*- Python -*-
# A minimal out-of-tree lit test folder for tests of k3c's passes and
# driver, run against an installed k3c (see README.md):
#
#   lit -v examples/lit --param k3c_prefix=/path/to/prefix
#
# The prefix is the one given to `cmake --install` (or K3C_PREFIX in the
# environment); its bin/ goes first on PATH, so RUN lines name the tools
# plainly (k3-opt, k3c, k3-run, k3-weights). FileCheck and `not` come from
# --param filecheck=PATH, FILECHECK in the environment, PATH, or the newest
# /usr/lib/llvm-*/bin.

import glob
import os
import shutil

import lit.formats

config.name = "k3c-user-tests"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir", ".test"]
config.excludes = ["Inputs", "README.md", "lit.cfg.py"]
config.test_source_root = os.path.dirname(os.path.abspath(__file__))
# Outputs (%t) go under the current directory unless --param k3c_out=DIR.
config.test_exec_root = lit_config.params.get(
    "k3c_out", os.path.join(os.getcwd(), "k3c-user-tests.out"))

prefix = lit_config.params.get("k3c_prefix") or os.environ.get("K3C_PREFIX")
if not prefix:
    lit_config.fatal("give the k3c install prefix: --param k3c_prefix=DIR "
                     "(or K3C_PREFIX=DIR)")
bindir = os.path.join(os.path.abspath(prefix), "bin")
for tool in ("k3-opt", "k3c"):
    if not os.access(os.path.join(bindir, tool), os.X_OK):
        lit_config.fatal("no %s in %s (is k3c installed there?)" % (tool, bindir))

filecheck = (lit_config.params.get("filecheck") or os.environ.get("FILECHECK")
             or shutil.which("FileCheck"))
if not filecheck:
    found = sorted(glob.glob("/usr/lib/llvm-*/bin/FileCheck"),
                   key=lambda p: int(p.split("llvm-")[1].split("/")[0]))
    filecheck = found[-1] if found else None
if not filecheck:
    lit_config.fatal("FileCheck not found: --param filecheck=PATH")
filecheck_dir = os.path.dirname(os.path.abspath(filecheck))

path = os.pathsep.join([bindir, filecheck_dir, os.environ.get("PATH", "")])
config.environment["PATH"] = path
lit_config.note("k3c tools from %s, FileCheck from %s" % (bindir, filecheck_dir))
