"""What a failed object-store request means: the errors of `formats.objstore`."""

from __future__ import annotations


def is_panic(e: BaseException) -> bool:
    """Whether `e` is pyo3's PanicException: a Rust panic inside obstore, raised as a BaseException
    (so ``except Exception`` does not catch it). Its class is not importable: it is told by name."""
    return type(e).__name__ == "PanicException"


__all__ = ["is_panic"]
