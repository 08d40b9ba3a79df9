#!/usr/bin/env python3
"""build_ext.py - compile coll's torch extension (meson runs this when torch imports).

    build_ext.py SOURCE OUTPUT COLL_INCLUDE_DIR [CXX]

Compiles SOURCE into the Python extension module OUTPUT, against the installed PyTorch's
headers and libraries (torch.utils.cpp_extension says where). coll's symbols are left
undefined: coll_torch/__init__.py loads libcoll.so (RTLD_GLOBAL) before the module, so the
module is rebuilt when coll.h changes, not each time libcoll is relinked.
"""
import os
import subprocess
import sys
import sysconfig


def main():
    src, out, coll_inc = sys.argv[1:4]
    cxx = sys.argv[4] if len(sys.argv) > 4 else os.environ.get("CXX", "c++")
    import torch
    from torch.utils import cpp_extension

    name = os.path.basename(out).split(".")[0]
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    cmd = [cxx, "-shared", "-fPIC", "-std=c++17", "-O2", "-g0", "-fvisibility=hidden",
           "-Wall", "-Wno-unused-parameter", "-Wno-unknown-pragmas",
           "-DTORCH_EXTENSION_NAME=" + name, "-DTORCH_API_INCLUDE_EXTENSION_H",
           "-D_GLIBCXX_USE_CXX11_ABI=%d" % abi, "-I" + coll_inc]
    for d in cpp_extension.include_paths():
        cmd += ["-isystem", d]
    cmd += ["-isystem", sysconfig.get_paths()["include"], src, "-o", out]
    for d in cpp_extension.library_paths():
        cmd += ["-L" + d, "-Wl,-rpath," + d]
    cmd += ["-lc10", "-ltorch", "-ltorch_cpu", "-ltorch_python"]
    return subprocess.call(cmd)


if __name__ == "__main__":
    sys.exit(main())
