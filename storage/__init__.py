"""Where a database's files live, behind one seam: a local directory, an object store (S3, obstore's
memory store) or a simulated object store, and the names of every file (storage.paths).

Layering: ``tools -> lsm -> compaction -> storage -> formats``. `formats` is codecs (bytes <-> values)
and the file-system calls they write through (formats.fileio); this package decides where the bytes go.
"""

from storage.base import (
    BACKOFF_MAX_MS,
    PUT_DIRS,
    REAL_TIME,
    REQUEST_TIMEOUT_MS,
    RETRY_TIMEOUT_MS,
    STAT_KEYS,
    TMP_PREFIX,
    PublishUnknownError,
    RealTime,
    Storage,
    duration_ms,
    file_buffer,
    numbered,
    request_bound_ms,
)
from storage.local import LOCAL, LocalStorage
from storage.registry import (
    URL_MARK,
    attach,
    detach,
    install,
    is_attached,
    is_url,
    key_of,
    path_kind,
    register,
    registered,
    storage_for,
)

__all__ = [
    "BACKOFF_MAX_MS",
    "LOCAL",
    "PUT_DIRS",
    "REAL_TIME",
    "REQUEST_TIMEOUT_MS",
    "RETRY_TIMEOUT_MS",
    "STAT_KEYS",
    "TMP_PREFIX",
    "URL_MARK",
    "LocalStorage",
    "PublishUnknownError",
    "RealTime",
    "Storage",
    "attach",
    "detach",
    "duration_ms",
    "file_buffer",
    "install",
    "is_attached",
    "is_url",
    "key_of",
    "numbered",
    "path_kind",
    "register",
    "registered",
    "request_bound_ms",
    "storage_for",
]
