"""The version set: the manifest, the SST files it names, and the read path's view of them.

LevelDB's VersionSet role. `VersionSet` is the only owner of the manifest of an open handle: it
recovers it at open (bumping the epochs, which fences every earlier handle), allocates file ids,
publishes edits (compare-and-swap on the next manifest id, fenced by the epochs), installs each
published version into the read path (`State`, swapped whole), keeps one `SstReader` per live file (the
reader cache), and deletes the files a version dropped once no iterator started before that version is
open. It knows nothing of the write path (the WAL, the memtables' contents, the clock): `lsm.db` owns
that and calls in here.

Locks (acquire in this order; never the other way round):

1. ``commit_lock`` guards the publication of a version: ``manifest`` and ``manifest_id`` change only
   under it, and ``install`` runs under it, so the read path sees versions in commit order.
2. ``lock`` (the state lock) guards ``state``, ``next_id``, the iterator pins (``iter_gens``), the
   retired files (``obsolete``) and the DB's snapshot counts. It is held for a few field updates only,
   never across I/O.

The DB's write lock (``lsm.db``) is taken before both when a writer rotates its memtable; the readers
dict is written under ``commit_lock`` (install) or by the one flush/compaction that owns the files.

Failure: a publication whose outcome is unknown (`lsm.manifest.PublishUnknownError`) puts the DB into the
failed state through the `fail` callback with ``published=None``: no later commit is attempted by this
handle (the files on disk may be ahead of what it knows) and nothing that version names is deleted. A
commit that published but could not install its version (``on_commit`` raised) fails the DB with
``published=True``. `may_be_published` is the one test every commit path (flush, compaction, bulk load)
applies before it removes its new SSTs after an error.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import secrets
import threading
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from compaction.merge import OutputSpec
from formats.manifest import Manifest, SortedRun, SstEntry
from formats.sst import SstReader
from lsm.cache import LruCache
from lsm.checkpoints import external_roots, find, kept_paths
from lsm.errors import DbFailedError, FencedError, NotADatabaseError
from lsm.l0_index import L0Index
from lsm.manifest import FenceToken, ManifestStore, PublishUnknownError
from lsm.options import DbOptions
from storage import Storage
from storage.paths import DbPaths, DbStore, open_store
from storage.ssts import open_sst

if TYPE_CHECKING:
    from lsm.memtable import Memtable

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Run:
    """A sorted run in the read path: its manifest record, open readers and their last keys."""

    record: SortedRun
    readers: tuple[SstReader, ...]
    last_keys: tuple[bytes, ...]


@dataclasses.dataclass(frozen=True)
class State:
    """What readers see, swapped atomically as a whole."""

    mem: Memtable
    imm: tuple[Memtable, ...]  # frozen memtables, newest first
    l0: tuple[tuple[SstEntry, SstReader], ...]  # newest first
    runs: tuple[Run, ...]  # newest first
    gen: int
    # point reads' index over `l0` (lsm.l0_index): kept by a state with the same L0 files, else fresh
    l0_index: L0Index = dataclasses.field(default_factory=L0Index, compare=False, repr=False)


class VersionSet:
    """The manifest, the live SST files and the read path's `State` of one open handle.

    `failure()` returns the DB's failed-state error (or None); `fail(error, published)` enters it and
    returns the `DbFailedError` to raise (see `lsm.db`)."""

    def __init__(
        self,
        store: DbStore,
        options: DbOptions,
        read_only: bool,
        failure: Callable[[], BaseException | None],
        fail: Callable[[BaseException, bool | None], DbFailedError],
        checkpoint: str | None = None,
    ) -> None:
        self.db = store  # the database's files: its backend and their names (storage.paths)
        self.storage = store.storage
        self.path = store.root
        self.options = options
        self.read_only = read_only
        self.sst_dir = store.paths.sst_dir
        self.store = ManifestStore(store)
        self._failure = failure
        self._fail = fail
        self._cache = LruCache(options.block_cache_bytes)
        self.readers: dict[str, SstReader] = {}  # the reader cache: one open reader per live SST
        self.commit_lock = threading.Lock()  # lock order 1: publication of a version (see module doc)
        self.lock = threading.Lock()  # lock order 2: state, next_id, iterator pins, retired files
        self.iter_gens: Counter[int] = Counter()  # state generation -> open iterators reading it
        self.obsolete: list[tuple[int, list[str]]] = []  # (generation retired at, file names)
        self.token: FenceToken | None = None
        self.token_bytes: object = None  # the mapped WRITER_EPOCH file (checked by each write)
        self.epoch_bytes = b""  # our epoch as WRITER_EPOCH holds it
        # the store's clock, by which checkpoints expire (the DB sets its MonotonicClock's read)
        self.now: Callable[[], int] = options.clock.now
        self.checkpoint = checkpoint  # the checkpoint id a read-only handle reads, if any
        self._cp_versions: dict[int, Manifest] = {}  # manifest versions checkpoints name (immutable)
        self._external: tuple[object, dict[str, str]] = ((), {})  # (manifest.external, name -> root)
        self._stores: dict[str, Storage] = {}  # root -> backend, for a clone's SSTs in other stores
        self._unpruned = 0  # versions this handle published since it last pruned old ones
        self.manifest_id, self.manifest = self._recover()
        m = self.manifest
        self.writer_epoch = m.writer_epoch
        self.compactor_epoch = m.compactor_epoch
        self.next_id = max(m.next_sst_id, max_sst_number(self.storage, self.sst_dir) + 1)
        self.state: State | None = None

    # -- open / recover -----------------------------------------------------------------------------
    def _recover(self) -> tuple[int, Manifest]:
        """The latest manifest; a writable open publishes it again with bumped epochs (fencing)."""
        store = self.store

        def try_create(manifest_id: int, m: Manifest) -> bool:
            try:
                return store.try_create(manifest_id, m)
            except PublishUnknownError as e:
                # an open's publication whose outcome is unknown raises its OSError, as any other I/O
                # error of an open does (the next open finds the version published or not and bumps past
                # it), instead of the internal signal a live handle's failed state is built from
                raise e.error from None
            except OSError as e:
                # a concurrent opener published first and removed our temporary file as a leftover:
                # we lost the race as with FileExistsError (lsm.manifest), so read its version
                before = [manifest_id - 1] if manifest_id > 1 else []  # the newest id when we read it
                if e.errno == errno.ENOENT and store.ids()[-1:] != before:
                    return False
                raise

        for _ in range(100):
            mid, man = store.latest()
            if man is None:
                if self.read_only:
                    raise NotADatabaseError(f"{self.path}: no manifest: not an lsm-sim database")
                try_create(1, Manifest())
                continue
            if self.read_only:
                if self.checkpoint is not None:  # the version it names, not the newest
                    cp = find(man, self.checkpoint, self.now(), self.path)
                    return cp.manifest_id, self.store.read(cp.manifest_id)
                return mid, man
            # the nonce makes this opener's version its own: two openers bump one version to the same
            # epochs, and an object store decides a create whose response was lost by reading the object
            # back (storage.objstore), which must then tell their bytes apart
            bumped = man.replace(writer_epoch=man.writer_epoch + 1, compactor_epoch=man.compactor_epoch + 1,
                                 writer_nonce=secrets.randbits(63) | 1)
            if try_create(mid + 1, bumped):
                self.token = FenceToken(self.db)
                self.token.publish(bumped.writer_epoch)
                self.token_bytes = self.token.view
                self.epoch_bytes = self.token.encode(bumped.writer_epoch)
                return mid + 1, bumped
        raise FencedError(f"{self.path}: could not open: the manifest keeps changing under us")

    def open_state(self, mem: Memtable, files: bool = True) -> State:
        """Build the first read-path `State` over the recovered manifest, with memtable `mem`; with
        `files=False` a state of no SST (a follower's, until its first refresh installs the version its
        checkpoint protects: the version read at open is not protected, its SSTs may be gone already)."""
        m = self.manifest
        if not files:
            self.state = State(mem, (), (), (), 0)
            return self.state
        self.state = State(mem, (), tuple((e, self.reader(e.name)) for e in m.l0), self.runs_of(m), 0)
        return self.state

    def mark_fenced(self) -> None:
        """Another handle took over (an object-store WAL id or manifest version said so): later writes
        raise FencedError at their fence check. (A shared cell holds the newer epoch already.)"""
        if not self.token.shared:
            self.token.publish(0)

    def fenced_on_store(self) -> bool:
        """Whether another handle has published a manifest version with newer epochs than ours, asked of
        the store now (for an object-store writer that was idle, lsm.wal_object; for an opener after its
        WAL claim): one HEAD of the version after ours, and only if it exists a read of the newest. An
        error reading the store is raised (OSError)."""
        if not self.storage.exists(self.store.path(self.manifest_id + 1)):
            return False
        return self._fence_error(self.store.latest()[1]) is not None

    def is_fenced(self) -> bool:
        """Has a newer handle published its epoch (WRITER_EPOCH) since we opened?"""
        return self.token.read() != self.writer_epoch

    # -- file ids and outputs -------------------------------------------------------------------------
    def sst_path(self, name: str) -> str:
        """The path of SST file `name`: in this store, or for a clone's SST kept by its source, there
        (lsm.checkpoints.sst_path)."""
        root = self._external_root(name)
        return self.db.paths.sst(name) if root is None else DbPaths(root).sst(name)

    def _external_root(self, name: str) -> str | None:
        ext = self.manifest.external
        if not ext:
            return None
        have, roots = self._external
        if have is not ext:
            roots = external_roots(self.manifest)
            self._external = (ext, roots)
        return roots.get(name)

    def storage_of(self, name: str) -> Storage:
        """The backend SST `name` is read from (this store's, or a clone's source's)."""
        root = self._external_root(name)
        if root is None:
            return self.storage
        st = self._stores.get(root)
        if st is None:
            st = self._stores[root] = open_store(root, self.db.options).storage
            st.cache = self.storage.cache
        return st

    def alloc_ids(self, n: int = 1) -> int:
        """Reserve `n` consecutive file ids; return the first."""
        with self.lock:
            first = self.next_id
            self.next_id += n
            return first

    def output_spec(self, prefix: str, target_bytes: int | None) -> OutputSpec:
        """Where and how a flush or compaction writes its SSTs (names ``<prefix>-e<writer epoch>-...``)."""
        o = self.options
        return OutputSpec(
            directory=self.sst_dir,
            prefix=f"{prefix}-e{self.writer_epoch}",  # unique per open: a fenced handle never clobbers a name
            format_version=o.sst_format_version,
            block_bytes=o.block_bytes,
            bloom_bits_per_key=o.bloom_bits_per_key,
            compression=o.compression,
            target_bytes=target_bytes,
        )

    def new_output(self, target_bytes: int | None) -> OutputSpec:
        """`output_spec` under a freshly allocated file id."""
        return self.output_spec(f"{self.alloc_ids():020d}", target_bytes)

    # -- commit --------------------------------------------------------------------------------------
    def commit(
        self, edit: Callable[[Manifest], Manifest], on_commit: Callable[[Manifest], None] | None = None
    ) -> Manifest:
        """Publish edit(current manifest) as the next version (CAS); FencedError if another handle took over.

        `on_commit(new)` runs under the commit lock right after the commit, so read-path state swaps
        happen in commit order. An I/O error enters the failed state (DbFailedError)."""
        with self.commit_lock:
            failed = self._failure()
            if isinstance(failed, DbFailedError):
                # the store's files may be ahead of what this handle knows (a maybe-published version):
                # only a reopen may commit again
                raise failed
            for _ in range(100):
                base = self.manifest
                new = edit(base)
                new = new.replace(next_sst_id=max(new.next_sst_id, self.next_id))
                try:
                    created = self.store.try_create(self.manifest_id + 1, new)
                except PublishUnknownError as e:
                    raise self._fail(e.error, None) from e.error
                except OSError as e:
                    # our temporary file was removed: by a newer owner? (a local directory's publication
                    # only: on an object store ENOENT is a missing bucket, and the listing fails as well)
                    if e.errno == errno.ENOENT and self.storage.appends:
                        try:
                            fenced = self._fence_error(self.store.latest()[1])
                        except OSError:  # the failed state below, not an error the commit leaks
                            fenced = None
                        if fenced is not None:
                            raise fenced from e
                    raise self._fail(e, False) from e
                if created:
                    self.manifest_id += 1
                    self.manifest = new
                    self._unpruned += 1
                    # every 16th id; and a count, since other editors' versions (a follower's checkpoint)
                    # take ids too and this handle's commits may then miss every 16th
                    if self.manifest_id % 16 == 0 or self._unpruned >= 32:
                        self._unpruned = 0
                        try:
                            self.delete_files(self.store.prunable(self.options.manifest_history))
                        except OSError:
                            # cleanup only (the next prune retries it): the version is published, and
                            # an error raised from here would have its caller remove the SSTs it names
                            pass
                    if on_commit is not None:
                        try:
                            on_commit(new)
                        except BaseException as e:
                            # the version is on disk but not in the read path: only a reopen may go on,
                            # and the files it names are live
                            raise self._fail(e, True) from e
                    return new
                lid, latest = self.store.latest()
                fenced = self._fence_error(latest)
                if fenced is not None:
                    raise fenced
                self.manifest_id, self.manifest = lid, latest
            raise FencedError(f"{self.path}: manifest commit kept conflicting")

    def _fence_error(self, latest: Manifest | None) -> FencedError | None:
        """The FencedError to raise if manifest `latest` (the newest on disk) carries epochs other than
        ours, else None."""
        if latest is not None and (latest.writer_epoch, latest.compactor_epoch) == (
            self.writer_epoch,
            self.compactor_epoch,
        ):
            return None
        return FencedError(
            f"{self.path}: another handle opened this database (writer epoch "
            f"{latest.writer_epoch if latest else '?'} > {self.writer_epoch}); this one is fenced"
        )

    # -- the read path's state ---------------------------------------------------------------------
    def reader(self, name: str) -> SstReader:
        """The cached reader of SST `name` (opened on first use)."""
        r = self.readers.get(name)
        if r is None:
            r = open_sst(self.sst_path(name), storage=self.storage_of(name), cache=self._cache if self.options.block_cache_bytes else None)
            self.readers[name] = r
        return r

    def runs_of(self, m: Manifest) -> tuple[Run, ...]:
        """The read path's `Run`s of manifest `m` (readers from the cache)."""
        out = []
        for record in m.runs:
            readers = tuple(self.reader(e.name) for e in record.ssts)
            out.append(Run(record, readers, tuple(e.info.last_key for e in record.ssts)))
        return tuple(out)

    def install(self, m: Manifest, drop_imm: Memtable | None = None) -> None:
        """Point the read path at manifest `m`, dropping frozen memtable `drop_imm` (now in an SST).
        Called under the commit lock (as `commit`'s on_commit), so versions are installed in order."""
        l0 = tuple((e, self.reader(e.name)) for e in m.l0)
        runs = self.runs_of(m)
        with self.lock:
            st = self.state
            imm = st.imm if drop_imm is None else tuple(x for x in st.imm if x is not drop_imm)
            index = st.l0_index if l0 == st.l0 else L0Index()
            self.state = dataclasses.replace(st, imm=imm, l0=l0, runs=runs, gen=st.gen + 1, l0_index=index)

    def follow(self, manifest_id: int, m: Manifest, mem: Memtable, with_state: Callable[[], None]) -> None:
        """A following reader's move to version `m` (id `manifest_id`) with memtable `mem` of the WAL rows
        past it (lsm.follower): installed whole, and `with_state()` (its seq) under the same state lock.
        The files the old state read are retired: this handle deletes nothing (read-only), it closes them
        once no iterator reads them."""
        with self.commit_lock:
            old = {e.name for e in self.manifest.all_ssts()}
            self.manifest_id, self.manifest = manifest_id, m
            l0 = tuple((e, self.reader(e.name)) for e in m.l0)
            runs = self.runs_of(m)
            with self.lock:
                st = self.state
                self.state = State(mem, (), l0, runs, st.gen + 1)
                with_state()
        gone = sorted(old - {e.name for e in m.all_ssts()})
        if gone:
            self.retire_files(gone)

    def swap_memtable(self, new: Memtable) -> None:
        """Freeze the active memtable (it becomes the newest immutable one) and make `new` active."""
        with self.lock:
            st = self.state
            self.state = dataclasses.replace(st, mem=new, imm=(st.mem,) + st.imm, gen=st.gen + 1)

    def pin(self) -> State:
        """The current state, pinned: its files are not deleted until `unpin(state.gen)`."""
        return self.pin_with(lambda: None)[0]

    def pin_with(self, read: Callable[[], T]) -> tuple[State, T]:
        """`pin`, and `read()` called under the state lock with it: a value the DB changes under that
        lock (its last seq, its stable seq) is then the one that goes with the pinned state. A `read`
        that raises leaves nothing pinned."""
        with self.lock:
            st = self.state
            value = read()
            self.iter_gens[st.gen] += 1
        return st, value

    def pinned(self, read: Callable[[State], T]) -> T:
        """`read(state)` of the current state, pinned while it runs."""
        st = self.pin()
        try:
            return read(st)
        finally:
            self.unpin(st.gen)

    def pinned_gens(self) -> set[int]:
        """The state generations some open iterator still reads (a follower keeps their versions)."""
        with self.lock:
            return set(self.iter_gens)

    def shape(self) -> dict[str, object]:
        """The current shape, for tools and tests: memtable rows, immutable memtables, L0 SST names
        (newest first) and each sorted run's SST names (newest run first)."""
        st = self.state
        return {
            "memtable_rows": len(st.mem),
            "immutable_memtables": len(st.imm),
            "l0": [e.name for e, _ in st.l0],
            "runs": [[e.name for e in run.record.ssts] for run in st.runs],
        }

    def unpin(self, gen: int) -> None:
        """Release a pin taken by `pin` or `pin_with`, then delete what no pin needs any more."""
        with self.lock:
            self.iter_gens[gen] -= 1
            if self.iter_gens[gen] <= 0:
                del self.iter_gens[gen]
        self.delete_obsolete()

    # -- retiring files ----------------------------------------------------------------------------
    def retire_files(self, names: list[str]) -> None:
        """Files no longer in the manifest: deleted once no iterator started before now is open."""
        with self.lock:
            self.obsolete.append((self.state.gen, names))
        self.delete_obsolete()

    def delete_obsolete(self) -> None:
        """Delete the retired files no open iterator can still read."""
        with self.lock:
            oldest = min(self.iter_gens) if self.iter_gens else None
            ready = [x for x in self.obsolete if oldest is None or oldest > x[0]]
            self.obsolete = [x for x in self.obsolete if not (oldest is None or oldest > x[0])]
        paths = []
        for _gen, names in ready:
            for name in names:
                self.readers.pop(name, None)
                paths.append(self.sst_path(name))
        self.delete_files(paths)

    def discard_outputs(self, entries: tuple[SstEntry, ...], error: BaseException | None = None) -> None:
        """Delete new SSTs whose commit failed with `error`, unless that commit may have published a
        manifest naming them (`may_be_published`): those stay, and the next open decides."""
        if error is not None and may_be_published(error):
            return
        for e in entries:
            r = self.readers.pop(e.name, None)
            if r is not None:
                r.close()
        self.delete_files([self.sst_path(e.name) for e in entries])

    # -- the deletion rule ---------------------------------------------------------------------------
    def owns_store(self) -> bool:
        """Whether this handle still owns the store, asked of the store at this moment: the fence token
        locally (a memory read of WRITER_EPOCH); on an object store one HEAD of the manifest version after
        ours (an opener publishes it before anything else), and only if it exists the newest version's
        epochs (it may be a commit of our own, racing this check). A read that fails answers no."""
        if self.read_only or self.token is None or self.is_fenced():
            return False
        if self.token.shared:  # every owner publishes its epoch in the cell we read: nothing else to ask
            return True
        try:
            fenced = self.fenced_on_store()
        except OSError:
            return False
        if fenced:
            self.mark_fenced()
        return not fenced

    def kept_paths(self) -> set[str]:
        """The paths the live checkpoints of the current manifest keep (lsm.checkpoints.kept_paths)."""
        return kept_paths(self.store, self.manifest, self.now(), self._cp_versions)

    def delete_files(self, paths: list[str], *, strict: bool = False) -> list[str]:
        """THE place every file of the store is deleted (docs/reliability.md, "One rule for deleting"):
        retired SSTs, outputs of failed jobs, garbage, obsolete WAL segments and objects, old manifest
        versions. Only the current owner deletes, and it asks the fence (`owns_store`) after the caller
        decided what to delete (after its listing: an owner that took over publishes its epoch before it
        writes any file, so a listing that shows one of its files is followed by a check that sees it).
        A fenced handle deletes nothing: `strict` (a gc the user asked for) raises FencedError, anything
        else leaves the files to the owner's gc. Returns the paths deleted; one that cannot be is left for
        the next gc.

        Nothing outside this store's root is ever deleted (a clone's SSTs its source keeps), nor what a
        live checkpoint keeps (its manifest version and every SST that names: `kept_paths`); a
        checkpoint version that cannot be read keeps everything."""
        own = os.path.join(self.path, "")
        paths = [p for p in paths if p.startswith(own)]
        if not paths:
            return []
        if self.manifest.checkpoints:
            try:
                kept = self.kept_paths()
            except OSError:
                return []
            paths = [p for p in paths if p not in kept]
            if not paths:
                return []
        if not self.owns_store():
            if strict:
                raise FencedError(
                    f"{self.path}: another handle opened this database; this one is fenced and deletes nothing"
                )
            return []
        return [p for p in paths if self._delete(p)]

    def _delete(self, path: str) -> bool:
        """Delete one file no manifest needs; True if it is gone. A failure leaves it for the next gc."""
        try:
            self.storage.delete(path)
        except OSError:
            return False
        return True

    def collect_garbage(self, grace_ms: int) -> list[str]:
        """Delete the SSTs no manifest names that are older than `grace_ms` (by the store's clock), and
        that no reader of this handle has open: leftovers of failed jobs and crashes. Listing first, then
        the fence (`delete_files`): a fenced handle raises FencedError and deletes nothing. Returns names."""
        storage = self.storage
        listing = storage.list_mtimes(self.sst_dir)
        cutoff = storage.now() - grace_ms / 1000
        with self.commit_lock:  # the manifest, its checkpoints and the open readers as of one commit
            live = {e.name for e in self.manifest.all_ssts()} | set(self.readers)
            kept = self.kept_paths() if self.manifest.checkpoints else set()
        live |= {os.path.basename(p) for p in kept if p.startswith(os.path.join(self.sst_dir, ""))}
        names = sorted(n for n, mtime in listing.items() if n.endswith(".sst") and n not in live and mtime <= cutoff)
        removed = self.delete_files([self.sst_path(n) for n in names], strict=True)
        if removed:
            storage.fsync_dir(self.sst_dir)
        return [os.path.basename(p) for p in removed]

    def live_files(self) -> set[str]:
        """Names of the SSTs this handle has open (live, or retired but still read by an iterator)."""
        return set(self.readers)

    def close(self) -> None:
        """Close every reader and the fencing token; idempotent."""
        if self.token is not None:
            self.token.close()
            self.token = None
        for r in list(self.readers.values()):
            r.close()
        self.readers.clear()


def may_be_published(error: BaseException) -> bool:
    """Whether a commit that raised `error` may have put its manifest version on disk: then the SSTs that
    version names must be kept (the next open decides). Only a `DbFailedError` with ``published`` False,
    or an error that is no `DbFailedError` (a fenced or conflicting commit, a failure before the commit),
    lets the caller delete them."""
    return isinstance(error, DbFailedError) and error.published is not False


def max_sst_number(storage: Storage, sst_dir: str) -> int:
    """The largest leading number of a file name in `sst_dir` (0 if none): new ids start above it."""
    best = 0
    for n in storage.list_names(sst_dir):
        head = n.split("-", 1)[0].split(".", 1)[0]
        if head.isdigit():
            best = max(best, int(head))
    return best



def prepare_store(store: DbStore, create: bool) -> None:
    """Refuse a path that holds no database (or something else), and lay out a new one."""
    paths = store.paths
    problem = store.storage.prepare_database(store.root, paths.dirs(), paths.manifest_dir, create)
    if problem is not None:
        raise NotADatabaseError(f"{store.root}: {problem}")

__all__ = ["Run", "State", "VersionSet", "max_sst_number", "may_be_published", "prepare_store"]
