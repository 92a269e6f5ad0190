"""Builds the optional compiled twin of ``rocketq/protocol/_codec.py``.

The same Python file is compiled by Cython as ``rocketq.protocol._ccodec`` with the C types
of ``_ccodec.pxd``. Without a C compiler or Cython the build says so and goes on: rocketq then
runs on the pure-Python module, which behaves the same (``ROCKETQ_NO_EXTENSIONS=1`` forces it).
"""

import os
import shutil
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join("rocketq", "protocol", "_codec.py")
TYPES = os.path.join("rocketq", "protocol", "_ccodec.pxd")
STAGE = os.path.join("build", "cython", "rocketq", "protocol")


class OptionalBuildExt(build_ext):
    """build_ext that never fails the install: the extension is an accelerator only."""

    def run(self):
        try:
            super().run()
        except Exception as exc:  # no compiler, no Cython, a failed compile
            print(f"rocketq: the compiled codec was not built ({exc}); using pure Python",
                  file=sys.stderr)

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as exc:
            print(f"rocketq: the compiled codec was not built ({exc}); using pure Python",
                  file=sys.stderr)


def extensions():
    if os.environ.get("ROCKETQ_NO_EXTENSIONS"):
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        print("rocketq: Cython is not installed; using pure Python", file=sys.stderr)
        return []
    stage = os.path.join(HERE, STAGE)
    os.makedirs(stage, exist_ok=True)
    shutil.copyfile(os.path.join(HERE, SOURCE), os.path.join(stage, "_ccodec.py"))
    shutil.copyfile(os.path.join(HERE, TYPES), os.path.join(stage, "_ccodec.pxd"))
    try:
        return cythonize(
            [Extension("rocketq.protocol._ccodec", [os.path.join(STAGE, "_ccodec.py")])],
            compiler_directives={"language_level": 3, "annotation_typing": False},
            quiet=True)
    except Exception as exc:
        print(f"rocketq: Cython could not translate the codec ({exc}); using pure Python",
              file=sys.stderr)
        return []


setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})
