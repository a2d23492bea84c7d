"""Loads the kernel library (libreplayssm.so, shipped inside the package) and wraps its C ABI with ctypes.

The library is optional at import time: CPU-only use (references, pools, planner) works without it.
"""

from __future__ import annotations

import ctypes
import os
from functools import lru_cache
from pathlib import Path

LIB_ENV = "RSSM_LIBRARY"  # overrides the library path


class KernelError(RuntimeError):
    """A C ABI call returned an error status; the message names the offending value."""


def library_path() -> Path:
    if os.environ.get(LIB_ENV):
        return Path(os.environ[LIB_ENV])
    found = sorted((Path(__file__).resolve().parent / "lib").glob("libreplayssm*.so"))
    return found[0] if found else Path(__file__).resolve().parent / "lib" / "libreplayssm.so"


@lru_cache(maxsize=1)
def load() -> ctypes.CDLL:
    path = library_path()
    if not path.exists():
        raise KernelError(f"kernel library not found at {path}: install the package with "
                          f"'pip install --no-build-isolation -e .' on a machine with nvcc")
    lib = ctypes.CDLL(str(path))
    lib.rssm_version.restype = ctypes.c_int32
    lib.rssm_status_string.restype = ctypes.c_char_p
    lib.rssm_status_string.argtypes = [ctypes.c_int]
    lib.rssm_last_error.restype = ctypes.c_char_p
    lib.rssm_mamba2_decode_params_size.restype = ctypes.c_size_t
    for fn in (lib.rssm_mamba2_decode_validate, lib.rssm_mamba2_decode):
        fn.restype = ctypes.c_int
    lib.rssm_mamba2_decode_validate.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    lib.rssm_mamba2_decode.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    if has_symbol(lib, "rssm_gdn_decode"):  # libraries built before the GDN kernels lack these
        lib.rssm_gdn_decode_params_size.restype = ctypes.c_size_t
        for fn in (lib.rssm_gdn_decode_validate, lib.rssm_gdn_decode):
            fn.restype = ctypes.c_int
        lib.rssm_gdn_decode_validate.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        lib.rssm_gdn_decode.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    if has_symbol(lib, "rssm_conv1d"):  # libraries built before the conv1d kernels lack these
        lib.rssm_conv1d_params_size.restype = ctypes.c_size_t
        for fn in (lib.rssm_conv1d_validate, lib.rssm_conv1d):
            fn.restype = ctypes.c_int
        lib.rssm_conv1d_validate.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        lib.rssm_conv1d.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    # Speculative decoding, prefill and the gated RMSNorm (libraries built before these kernels lack them): each
    # entry point comes with <name>_params_size and <name>_validate.
    for name in ("rssm_mamba2_verify", "rssm_spec_commit", "rssm_snapshot_commit", "rssm_gdn_verify",
                 "rssm_mamba2_prefill", "rssm_gdn_prefill", "rssm_conv1d_prefill", "rssm_gated_rmsnorm"):
        if has_symbol(lib, name):
            getattr(lib, f"{name}_params_size").restype = ctypes.c_size_t
            for fn in (getattr(lib, f"{name}_validate"), getattr(lib, name)):
                fn.restype = ctypes.c_int
            getattr(lib, f"{name}_validate").argtypes = [ctypes.c_void_p, ctypes.c_size_t]
            getattr(lib, name).argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    if has_symbol(lib, "rssm_prefill_workspace_size"):
        lib.rssm_prefill_workspace_size.restype = ctypes.c_size_t
        lib.rssm_prefill_workspace_size.argtypes = [ctypes.c_int32, ctypes.c_int32]
    return lib


def has_symbol(lib: ctypes.CDLL, name: str) -> bool:
    """Whether the loaded library exports `name` (a family's entry points appear once its kernels exist)."""
    return hasattr(lib, name)


def require(name: str) -> ctypes.CDLL:
    """The loaded library, which must export `name`; otherwise a KernelError saying to rebuild it."""
    lib = load()
    if not has_symbol(lib, name):
        raise KernelError(f"the kernel library at {library_path()} has no {name}: it was built before these "
                          f"kernels existed; rebuild it ('pip install --no-build-isolation -e .')")
    return lib


def available() -> bool:
    try:
        load()
        return True
    except (KernelError, OSError):
        return False


def check(status: int, what: str) -> None:
    if status != 0:
        lib = load()
        name = lib.rssm_status_string(status).decode()
        raise KernelError(f"{what}: {name}: {lib.rssm_last_error().decode()}")
