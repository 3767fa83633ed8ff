"""`SstOutput`: a stream of sorted rows (or its columns) into SSTs of about a target size, through the
one SST writer (`formats.sst.SstWriter`), never splitting one key's versions across files, so a sorted
run's SSTs never overlap. Every writer of SSTs from other SSTs, memtables or a bulk load's slices uses
it: the flush, the local and Spark compaction executors (`compaction.merge.run_job`) and the bulk-load
tasks (`lsm.bulk_task`). `OutputSpec` says where and how."""

from __future__ import annotations

import bisect
import concurrent.futures
import contextlib
import dataclasses
import itertools
import operator
import os
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from compaction.stream import records
from formats.row_array import record_rows
from formats.sst import SsTableInfo, SstWriter
from formats.sst_blocks import is_value_array
from formats.sst_records import Scratch, record_size
from storage import file_buffer, storage_for


@dataclasses.dataclass(frozen=True)
class OutputSpec:
    """Where and how output SSTs are written. Names: ``<prefix>-<n:04d>.sst`` in `directory`."""

    directory: str
    prefix: str
    format_version: int = 1
    block_bytes: int = 4096
    bloom_bits_per_key: int = 10
    compression: str | None = None
    target_bytes: int | None = 8 << 20  # None: one output file
    sync: bool = True



class _RecordKeys:
    """The keys of a record array as bytes, one at a time (`SstOutput.write_stream` reads a few)."""

    __slots__ = ("keys",)

    def __init__(self, records: Any) -> None:
        self.keys = records["key"]

    def __len__(self) -> int:
        return len(self.keys)

    def __getitem__(self, i: int) -> bytes:
        return self.keys[i].tobytes()


def _joined_records(chunks: list, scratch: Scratch) -> Iterator[Any]:
    """Record arrays with adjacent arrays of one layout joined into `scratch`'s buffers (one copy of
    their records, into memory kept from file to file), so the writer checks and encodes a file's
    records in a few numpy passes, not a few per round."""
    import numpy as np

    for i, (_, run) in enumerate(itertools.groupby(chunks, key=operator.attrgetter("dtype"))):
        parts = list(run)
        if len(parts) == 1:
            yield parts[0]
            continue
        dtype = parts[0].dtype
        void = np.dtype((np.void, dtype.itemsize))
        into = scratch.get(f"records-{i}", dtype.itemsize * sum(map(len, parts))).view(void)
        yield records(np.concatenate([records(p, void) for p in parts], out=into), dtype)


class _HeldRecords:
    """The record pieces of the file being filled (`SstOutput.write_stream`), copied into buffers of
    `SLAB` bytes kept from one file to the next. Holding the pieces themselves kept every round's array
    alive until the file was cut (about a hundred arrays of sizes that vary from round to round), and the
    allocator, whose mmap threshold rises to the largest buffer freed, then served them from a heap that
    fragmented as a merge ran on: the peak grew with the length of the merge, not with what it held."""

    SLAB = 1 << 20

    def __init__(self) -> None:
        self._slabs: list[Any] = []
        self._slab = 0  # the slab being filled, and where in it
        self._at = 0

    def hold(self, piece: Any) -> list[Any]:
        """Copies of the records of `piece` (a contiguous record array) in the kept buffers, as one or
        more record arrays of its dtype (split where a buffer is full)."""
        import numpy as np

        dtype = piece.dtype
        size = dtype.itemsize
        out = []
        done, n = 0, len(piece)
        while done < n:
            if self._slab == len(self._slabs):
                self._slabs.append(np.empty(max(self.SLAB, size), np.uint8))
            slab = self._slabs[self._slab]
            room = (len(slab) - self._at) // size
            if room == 0:
                self._slab += 1
                self._at = 0
                continue
            k = min(room, n - done)
            src = np.ascontiguousarray(piece[done : done + k])
            slab[self._at : self._at + k * size] = np.frombuffer(src, np.uint8)  # a copy of bytes:
            out.append(np.frombuffer(slab.data, dtype, k, self._at))  # field by field is 6x slower
            self._at += k * size
            done += k
        return out

    def release(self) -> None:
        """The held pieces are written: their buffers are filled again from the start."""
        self._slab = 0
        self._at = 0


def _upload_staged(path: str, staged: Any) -> None:
    """PUT the bytes of `staged` (a `file_buffer`) as the object at `path`, then let the buffer go."""
    try:
        storage_for(path).write_file(path, (staged,))
    finally:
        with contextlib.suppress(BufferError):  # a view still held elsewhere: freed with it instead
            staged.close()


class SstOutput:
    """Writes a row stream into SSTs of about `spec.target_bytes`, splitting only between keys."""

    def __init__(self, spec: OutputSpec, creation_timestamp: int) -> None:
        self.spec = spec
        self.tick = creation_timestamp
        self.outputs: list[tuple[str, SsTableInfo]] = []
        self.write_seconds = 0.0
        self._counter = itertools.count()
        self._scratch = Scratch()  # its writers' encoding buffers, kept from one file to the next
        self._held = _HeldRecords()  # the pending record pieces of `write_stream`, likewise
        # an object store: each finished file is uploaded by one background thread while the next is
        # encoded (at most one upload in flight, so one file's bytes more in memory than locally)
        self._uploads: concurrent.futures.ThreadPoolExecutor | None = None
        self._upload: concurrent.futures.Future | None = None
        self._background = storage_for(spec.directory).uploads

    def _finish(self, name: str, w: SstWriter) -> None:
        t0 = time.perf_counter()
        self.outputs.append((name, w.finish()))
        self.write_seconds += time.perf_counter() - t0

    def _new_writer(self) -> tuple[str, SstWriter]:
        s = self.spec
        name = f"{s.prefix}-{next(self._counter):04d}.sst"
        w = SstWriter(
            os.path.join(s.directory, name),
            format_version=s.format_version,
            creation_timestamp=self.tick,
            block_bytes=s.block_bytes,
            bloom_bits_per_key=s.bloom_bits_per_key,
            compression=s.compression,
            sync=s.sync,
            scratch=self._scratch,
            put=self._put_behind if self._background else None,
        )
        return name, w

    def _put_behind(self, path: str, chunks: Sequence[Any]) -> None:
        """Upload a finished object-store SST in the background, once the previous upload is done. Its
        bytes wait for the upload in a `file_buffer` (a mapped temporary file), as a local SST's bytes
        wait for write-back in the page cache, so the next file is encoded beside them without their
        size in anonymous memory."""
        self._wait_upload()
        if self._uploads is None:
            self._uploads = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="lsm-sst-upload")
        views = [memoryview(c).cast("B") for c in chunks]
        staged = file_buffer(sum(map(len, views)))
        at = 0
        for view in views:
            staged[at : at + len(view)] = view
            at += len(view)
        self._upload = self._uploads.submit(_upload_staged, path, staged)

    def _wait_upload(self, quiet: bool = False) -> None:
        """Wait for the upload in flight; raise its error unless `quiet`."""
        up, self._upload = self._upload, None
        if up is None:
            return
        t0 = time.perf_counter()
        try:
            up.result()
        except BaseException:
            if not quiet:
                raise
        finally:
            self.write_seconds += time.perf_counter() - t0

    def _drain(self, quiet: bool = False) -> None:
        """Every upload done (its error raised unless `quiet`), the upload thread stopped."""
        try:
            self._wait_upload(quiet)
        finally:
            if self._uploads is not None:
                self._uploads.shutdown()
                self._uploads = None

    def write(self, rows: Iterable[tuple]) -> list[tuple[str, SsTableInfo]]:
        """Write `rows` into new SSTs of about the target size, never splitting one key's versions;
        return [(name, SsTableInfo)]. On error, every file this call wrote is removed."""
        target = self.spec.target_bytes
        name, w = None, None
        last_key = None
        with self._removed_on_error():
            for row in rows:
                if w is None:
                    name, w = self._new_writer()
                elif target is not None and w.estimated_size >= target and row[0] != last_key:
                    self._finish(name, w)
                    name, w = self._new_writer()
                w.add(row)
                last_key = row[0]
            if w is not None and len(w):
                self._finish(name, w)
        return self.outputs

    def write_batches(self, batches: Iterable[list[tuple]]) -> list[tuple[str, SsTableInfo]]:
        """`write` for a stream of row lists (each sorted, holding whole keys): a list that fits in the
        current output goes in with one `SstWriter.extend`; the list that crosses the target size goes
        row by row, so the files are the ones `write` makes from the same rows."""
        target = self.spec.target_bytes
        name, w = None, None
        last_key = None
        with self._removed_on_error():
            for rows in batches:
                if not rows:
                    continue
                if w is None:
                    name, w = self._new_writer()
                if not w.extend(rows, target):
                    for row in rows:
                        if target is not None and w.estimated_size >= target and row[0] != last_key:
                            self._finish(name, w)
                            name, w = self._new_writer()
                        w.add(row)
                        last_key = row[0]
                last_key = rows[-1][0]
            if w is not None and len(w):
                self._finish(name, w)
        return self.outputs

    def write_columns(
        self,
        keys: Sequence[bytes],
        seqs: Sequence[int | None] | int | None,
        tss: Sequence[int | None] | int | None,
        exps: Sequence[int | None] | int | None,
        values: Sequence[bytes | None] | Any,
    ) -> list[tuple[str, SsTableInfo]]:
        """`write` for rows given as columns (sorted; `seqs`, `tss`, `exps` may each be one value for
        every row, `values` a numpy array of fixed-width values, as `SstWriter.extend_columns` takes
        them): the cuts between files are found on the running `estimated_size` of the rows, and each
        file's columns go in with one `SstWriter.extend_columns`, so the files are the ones `write` makes
        from the same rows, with no tuple per row."""
        n = len(keys)
        keys = keys if type(keys) is list else list(keys)
        cols = [c if c is None or isinstance(c, int) else list(c) for c in (seqs, tss, exps)]
        target = self.spec.target_bytes
        # ends[i]: `estimated_size` of a writer holding rows [0, i) (SstWriter counts key + value + 33)
        if is_value_array(values):
            vlens: Iterable[int] = itertools.repeat(values.dtype.itemsize, n)
        else:
            values = values if type(values) is list else list(values)
            vlens = map(len, values) if None not in values else [0 if v is None else len(v) for v in values]
        sizes = map(operator.add, map(len, keys), vlens)
        ends = list(map(operator.add, itertools.accumulate(sizes, initial=0), range(0, 33 * (n + 1), 33)))
        with self._removed_on_error():
            i = 0
            while i < n:
                j = n
                if target is not None:
                    # `write` starts a new file before the first row that finds the writer at the target
                    # size, unless that row continues the key before it
                    j = bisect.bisect_left(ends, ends[i] + target, i + 1, n)
                    while j < n and keys[j] == keys[j - 1]:
                        j += 1
                name, w = self._new_writer()
                part = [c if c is None or isinstance(c, int) else c[i:j] for c in cols]
                w.extend_columns(keys[i:j], part[0], part[1], part[2], values[i:j])
                self._finish(name, w)
                i = j
        return self.outputs

    def write_stream(self, chunks: Iterable[list[tuple] | Any]) -> list[tuple[str, SsTableInfo]]:
        """`write` for a stream of chunks of sorted rows, each holding whole keys, each either a row
        list or a numpy array of records (`formats.sst_records`) as `compaction.columnar` makes them.

        Each file's chunks are held as they come (a row list turned into columns) and go into its
        `SstWriter` when the file is cut (`_write_pending`); the cuts are found on the running size of
        the rows, exactly where `write` makes them, so the files are the ones `write` makes from the same
        rows."""
        import numpy as np

        target = self.spec.target_bytes
        pending: list = []  # column tuples and record arrays, in order
        held = self._held
        est = 0  # `estimated_size` of a writer holding the pending rows
        last_key: bytes | None = None
        with self._removed_on_error():
            for c in chunks:
                if type(c) is list:
                    if not c:
                        continue
                    keys, seqs, tss, exps, values = map(list, zip(*c, strict=True))
                    vlens = [0 if v is None else len(v) for v in values] if None in values else map(len, values)
                    sizes = np.fromiter(map(operator.add, map(len, keys), vlens), np.int64, len(keys)) + 33
                    part: Any = (keys, seqs, tss, exps, values)
                else:  # records: a key becomes bytes only where a cut is looked for
                    keys, sizes, part = _RecordKeys(c), record_size(c), c
                n = len(keys)
                if not n:
                    continue
                ends = np.cumsum(sizes) - sizes  # size of the chunk's rows before row i
                i = 0
                while i < n:
                    j = n
                    if target is not None:
                        # `write` starts a new file before the first row that finds the writer at the
                        # target size, unless that row continues the key before it (or the file is empty)
                        lo = i if pending else i + 1
                        j = max(lo, int(np.searchsorted(ends, target - est + int(ends[i]), "left")))
                        while j < n and keys[j] == (keys[j - 1] if j else last_key):
                            j += 1
                    if j > i:
                        if type(part) is tuple:
                            pending.append(tuple(col[i:j] for col in part))
                        else:
                            pending += held.hold(part[i:j])
                        est += int(sizes[i:j].sum())
                        last_key = keys[j - 1]
                    if j < n:
                        self._write_pending(pending)
                        held.release()
                        pending = []
                        est = 0
                    i = j
            if pending:
                self._write_pending(pending)
        return self.outputs

    def _write_pending(self, chunks: list) -> None:
        """One output file from `write_stream`'s pending chunks: record arrays only, each with one
        `SstWriter.extend_records` (the writer holds them as they are); else every chunk as columns,
        joined, with one `extend_columns`."""
        if not any(type(c) is tuple for c in chunks):
            name, w = self._new_writer()
            for run in _joined_records(chunks, self._scratch):
                w.extend_records(run)
            self._finish(name, w)
            return
        chunks = [c if type(c) is tuple else tuple(map(list, zip(*record_rows(c), strict=True))) for c in chunks]
        name, w = self._new_writer()
        cols = [list(itertools.chain.from_iterable(c[k] for c in chunks)) for k in range(5)]
        del chunks
        w.extend_columns(*cols)
        del cols
        self._finish(name, w)

    @contextlib.contextmanager
    def _removed_on_error(self) -> Iterator[None]:
        """On leaving, wait for the background uploads; on any error inside (or of an upload), delete
        what this output wrote (`remove_outputs`) and re-raise."""
        try:
            yield
            self._drain()  # the outputs are whole (uploaded) before a caller sees them
        except BaseException:
            self._drain(quiet=True)
            self.remove_outputs()
            raise

    def remove_outputs(self) -> None:
        """Delete files this output wrote (after a failure): nothing partial is left behind."""
        for name, _ in self.outputs:
            path = os.path.join(self.spec.directory, name)
            try:
                storage_for(path).delete(path)  # a file, or an object (an object-store database)
            except OSError:
                pass  # unreferenced: garbage collection removes it later
        self.outputs = []


__all__ = ["OutputSpec", "SstOutput"]
