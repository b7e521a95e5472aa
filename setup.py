"""Builds torchtpu._C with CMake against the installed torch.

Install with `pip install --no-build-isolation -e .` so the build sees the
torch already installed (an isolated build would fetch another one).
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        out = Path(self.get_ext_fullpath(ext.name)).resolve()
        # A persistent build directory makes rebuilds incremental.
        build_dir = ROOT / "build" / f"cmake-py{sys.version_info.major}{sys.version_info.minor}"
        build_dir.mkdir(parents=True, exist_ok=True)
        args = [
            "cmake", str(ROOT),
            f"-DPython3_EXECUTABLE={sys.executable}",
            "-DCMAKE_BUILD_TYPE=Release",
            f"-DCMAKE_LIBRARY_OUTPUT_DIRECTORY={out.parent}",
        ]
        if shutil.which("ninja"):
            args += ["-G", "Ninja"]
        if shutil.which("ccache"):
            args += ["-DCMAKE_C_COMPILER_LAUNCHER=ccache", "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"]
        cache = build_dir / "CMakeCache.txt"
        if cache.exists() and "Ninja" in cache.read_text() and not shutil.which("ninja"):
            shutil.rmtree(build_dir)
            build_dir.mkdir(parents=True)
        subprocess.check_call(args, cwd=build_dir)
        jobs = os.environ.get("TORCHTPU_BUILD_JOBS", str(os.cpu_count() or 2))
        subprocess.check_call(["cmake", "--build", ".", "--target", "_C", "-j", jobs], cwd=build_dir)


setup(
    ext_modules=[Extension("torchtpu._C", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
)
