"""Give freed heap memory back to the operating system (glibc ``malloc_trim``).

Closing an ONNX Runtime session frees its weights and buffers into the C heap, but glibc
keeps freed pages mapped when they sit below live allocations (fragmentation), so the
process's resident memory keeps every earlier stage's peak. ``malloc_trim(0)`` returns
the free pages of every heap; it changes no computed value.
"""

from __future__ import annotations

import ctypes
import logging

__all__ = ["release_free_heap"]

log = logging.getLogger(__name__)


def release_free_heap() -> bool:
    """``malloc_trim(0)`` where the C library has it (glibc): True when it ran, False where
    there is none (musl, macOS)."""
    try:
        trim = ctypes.CDLL(None).malloc_trim  # the process's own C library
    except (OSError, AttributeError, TypeError):
        return False
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    trim(0)  # 1 when pages went back, 0 when there were none to give
    return True
