"""pip install --no-build-isolation ./python (no network): builds libxattn_c from this checkout
with CMake and packages it with the Python sources and the headers xattn.policy compiles against.
XATTN_BUILD_DIR names an existing Release build of the checkout to bring up to date and take the
library from, instead of configuring and compiling one afresh (make test's package test does)."""
import contextlib
import os
import shutil
import subprocess
import tempfile

from setuptools import setup
from setuptools.command.build_py import build_py

# the checkout: this file's parent, or XATTN_SOURCE_DIR when building from a copy of python/
ROOT = os.environ.get("XATTN_SOURCE_DIR") or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class build_with_cmake(build_py):
    def run(self):
        super().run()
        package = os.path.join(self.build_lib, "xattn")
        existing = os.environ.get("XATTN_BUILD_DIR")
        with contextlib.nullcontext(existing) if existing else tempfile.TemporaryDirectory() as build:
            if not existing:
                subprocess.run(["cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
                                "-DXATTN_BUILD_TESTS=OFF", "-DXATTN_BUILD_BENCH=OFF"], check=True,
                               stdout=subprocess.DEVNULL)
            subprocess.run(["cmake", "--build", build, "--target", "xattn_python", "-j", str(os.cpu_count() or 1)],
                           check=True)
            shutil.copy(os.path.join(build, "python", "xattn", "libxattn_c.so"), package)
            kernels = os.path.join(build, "python", "xattn", "libxattn_kernels.a")
            if os.path.exists(kernels):
                shutil.copy(kernels, package)
            with open(os.path.join(build, "python", "xattn", "_config.py")) as f:
                config = f.read()
        # the headers travel with the package: compiled policies find them relative to it
        for tree in ("include", os.path.join("c", "include")):
            shutil.copytree(os.path.join(ROOT, tree), os.path.join(package, "include"), dirs_exist_ok=True)
        start, end = config.index("INCLUDE_DIRS"), config.index("KERNELS")
        with open(os.path.join(package, "_config.py"), "w") as f:
            f.write(config[:start] + 'INCLUDE_DIRS = ["include"]  # relative to the package\n' + config[end:])


setup(cmdclass={"build_py": build_with_cmake})
