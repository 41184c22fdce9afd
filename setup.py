"""Build the Cython extension modules.

Every ``*.pyx`` under ``shadow/`` becomes one extension module.  Compiler directives are set
once here.  ``SHADOW_DEBUG=1`` builds with bounds checking, wraparound and initialized-check on
(slower; use it when a test crashes), ``SHADOW_ONLY=glob`` limits a development build to
matching modules (``SHADOW_ONLY='shadow.sim.*'``).  No numpy headers are needed: the extension
code uses typed memoryviews only.
"""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path

from setuptools import Extension, setup

ROOT = Path(__file__).parent
DEBUG = os.environ.get("SHADOW_DEBUG", "") not in ("", "0")
ONLY = os.environ.get("SHADOW_ONLY", "")
# NOTE: `make venv` installs the package editable with SHADOW_NO_EXT=1 and then builds the
# extensions once, in place (`make build`), instead of compiling everything twice.
NO_EXT = os.environ.get("SHADOW_NO_EXT", "") not in ("", "0")


def _extensions() -> list[Extension]:
    if NO_EXT:
        return []
    exts = []
    for pyx in sorted(ROOT.glob("shadow/**/*.pyx")):
        rel = pyx.relative_to(ROOT).with_suffix("")
        name = ".".join(rel.parts)
        if ONLY and not fnmatch.fnmatch(name, ONLY):
            continue
        exts.append(
            Extension(
                name,
                [str(pyx.relative_to(ROOT))],
                extra_compile_args=["-O3"] if not DEBUG else ["-O0", "-g"],
            )
        )
    return exts


def _cythonize(exts: list[Extension]) -> list[Extension]:
    if not exts:
        return []
    from Cython.Build import cythonize

    directives = {
        "language_level": "3",
        "boundscheck": DEBUG,
        "wraparound": DEBUG,
        "initializedcheck": DEBUG,
        "cdivision": True,
        "nonecheck": False,
        "embedsignature": True,
    }
    return cythonize(
        exts,
        compiler_directives=directives,
        annotate=os.environ.get("SHADOW_ANNOTATE", "") not in ("", "0"),
        nthreads=int(os.environ.get("SHADOW_BUILD_JOBS", "2")),
        quiet=True,
    )


setup(ext_modules=_cythonize(_extensions()))
