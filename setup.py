"""Builds the optional compiled twins of ``rocketq/protocol/_codec.py``,
``rocketq/store/_records.py`` and ``rocketq/store/_encode.py``.

Each Python file is compiled by Cython under a ``_c`` name (``rocketq.protocol._ccodec``,
``rocketq.store._crecords``, ``rocketq.store._cencode``) with the C types of its ``.pxd``.
Without a C compiler or Cython the build says so and goes on: rocketq then runs on the
pure-Python modules, which behave the same (``ROCKETQ_NO_EXTENSIONS=1`` forces them).
"""

import os
import shutil
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
#: (package, pure module, compiled module, Cython directives beyond the defaults, C libraries).
#: The store's loops check every length themselves and divide only non-negative numbers, so
#: they run without Cython's bounds checks and with C division; they take CRC-32 from zlib.
TWINS = [
    ("protocol", "_codec", "_ccodec", {}, []),
    ("store", "_records", "_crecords",
     {"boundscheck": False, "wraparound": False, "cdivision": True}, ["z"]),
    ("store", "_encode", "_cencode",
     {"boundscheck": False, "wraparound": False, "cdivision": True}, ["z"]),
]


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
    built = []
    for package, pure, compiled, directives, libraries in TWINS:
        stage = os.path.join("build", "cython", "rocketq", package)
        os.makedirs(os.path.join(HERE, stage), exist_ok=True)
        source = os.path.join(HERE, "rocketq", package)
        shutil.copyfile(os.path.join(source, pure + ".py"),
                        os.path.join(HERE, stage, compiled + ".py"))
        shutil.copyfile(os.path.join(source, compiled + ".pxd"),
                        os.path.join(HERE, stage, compiled + ".pxd"))
        try:
            built += cythonize(
                [Extension(f"rocketq.{package}.{compiled}",
                           [os.path.join(stage, compiled + ".py")],
                           libraries=libraries, extra_compile_args=["-O3"])],
                compiler_directives={"language_level": 3, "annotation_typing": False,
                                     **directives},
                quiet=True)
        except Exception as exc:
            print(f"rocketq: Cython could not translate {pure} ({exc}); using pure Python",
                  file=sys.stderr)
    return built


setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})
