"""What the `lsm` command line asks of a path on either backend: the entries one level down, the sizes
in one listing, and whether a path is a directory, a file or nothing (storage)."""

from __future__ import annotations

import os

from storage import path_kind, storage_for
from tests.storage.test_storage import root  # noqa: F401 (the fixture: a directory, an S3 prefix, memory://)


def test_entries_sizes_and_what_a_path_is(root: str) -> None:  # noqa: F811
    st = storage_for(root)
    for sub, name, data in (("sst", "a.sst", b"12345"), ("sst", "b.sst", b"1"), ("wal", "1.wal", b"")):
        st.makedirs(os.path.join(root, sub))
        st.write_file(os.path.join(root, sub, name), (data,))
    st.write_file(os.path.join(root, "README"), (b"hi",))
    st.makedirs(os.path.join(root, "sst", "deeper"))
    st.write_file(os.path.join(root, "sst", "deeper", "c.sst"), (b"xyz",))  # not directly in sst/
    assert {n: size for n, size in st.list_sizes(os.path.join(root, "sst")).items() if n != "deeper"} == {
        "a.sst": 5,
        "b.sst": 1,
    }
    assert st.list_sizes(os.path.join(root, "wal")) == {"1.wal": 0}
    # files and directories alike (an object store: objects and the prefixes one level down)
    assert sorted(st.list_entries(root)) == ["README", "sst", "wal"]
    assert sorted(st.list_entries(os.path.join(root, "sst"))) == ["a.sst", "b.sst", "deeper"]
    assert st.list_entries(os.path.join(root, "nothing")) == []
    assert path_kind(root) == "dir" and path_kind(os.path.join(root, "sst")) == "dir"
    assert path_kind(os.path.join(root, "sst", "a.sst")) == "file"
    assert path_kind(os.path.join(root, "nothing")) is None
    assert path_kind(os.path.join(root, "ss")) is None  # a prefix of a name is not a directory


def test_a_fifo_is_neither_a_file_nor_a_directory(tmp_path) -> None:
    os.mkfifo(tmp_path / "pipe")
    assert path_kind(str(tmp_path / "pipe")) == "other"  # reading it would block: callers refuse it
