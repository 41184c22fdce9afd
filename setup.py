"""Build the Cython extension modules.

Every ``*.pyx`` under ``shadow/`` becomes one extension module.  Compiler directives are set
once here.  ``SHADOW_DEBUG=1`` builds with bounds checking, wraparound and initialized-check on
(slower; use it when a test crashes; switching it rebuilds the modules built the other way),
``SHADOW_WERROR=1`` turns compiler warnings into errors (CI), ``SHADOW_ONLY=glob`` limits a
development build to
matching modules (``SHADOW_ONLY='shadow.sim.*'``).  No numpy headers are needed: the extension
code uses typed memoryviews only.
"""

from __future__ import annotations

import fnmatch
import json
import os
import sys
from pathlib import Path

from setuptools import Extension, setup

ROOT = Path(__file__).parent
DEBUG = os.environ.get("SHADOW_DEBUG", "") not in ("", "0")
ONLY = os.environ.get("SHADOW_ONLY", "")
# NOTE: CI builds with SHADOW_WERROR=1 (.ci/run), so a new compiler warning fails it; a user's
# build with another compiler is not stopped by warnings.
WERROR = os.environ.get("SHADOW_WERROR", "") not in ("", "0")
# NOTE: `make venv` installs the package editable with SHADOW_NO_EXT=1 and then builds the
# extensions once, in place (`make build`), instead of compiling everything twice.
NO_EXT = os.environ.get("SHADOW_NO_EXT", "") not in ("", "0")
MODE = "debug" if DEBUG else "release"
#: How each in-place module was last built (debug or release).
MODE_FILE = ROOT / "build" / "shadow-ext-modes.json"


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
                extra_compile_args=(["-O3"] if not DEBUG else ["-O0", "-g"])
                + (["-Werror"] if WERROR else []),
            )
        )
    return exts


def _read_modes() -> dict[str, str]:
    try:
        return dict(json.loads(MODE_FILE.read_text()))
    except (OSError, ValueError, TypeError):
        return {}


def _drop_other_mode(exts: list[Extension]) -> None:
    """Delete the generated C of modules last built in the other mode.

    NOTE: Cython and build_ext rebuild only what is older than its source, so without this a
    ``SHADOW_DEBUG=1`` build after a normal one would compile nothing (and the reverse).
    """
    modes = _read_modes()
    for e in exts:
        if modes.get(e.name) != MODE:
            (ROOT / e.sources[0]).with_suffix(".c").unlink(missing_ok=True)


def _record_mode(exts: list[Extension]) -> None:
    modes = _read_modes()
    modes.update({e.name: MODE for e in exts})
    MODE_FILE.parent.mkdir(parents=True, exist_ok=True)
    tmp = MODE_FILE.with_suffix(".tmp")
    tmp.write_text(json.dumps(modes, indent=1, sort_keys=True) + "\n")
    tmp.replace(MODE_FILE)


def _cythonize(exts: list[Extension]) -> list[Extension]:
    if not exts:
        return []
    _drop_other_mode(exts)
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


_EXTS = _extensions()
setup(ext_modules=_cythonize(_EXTS))
if any(cmd in sys.argv for cmd in ("build_ext", "build", "bdist_wheel", "editable_wheel", "develop",
                                   "install")):
    _record_mode(_EXTS)  # NOTE: only reached when the build succeeded
