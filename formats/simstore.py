"""A simulated object store on a simulated clock, driven by a seeded scheduler (deterministic simulation).

As SlateDB's DST module and FoundationDB's simulator test themselves: the whole engine runs unchanged over
an object store whose every request is an event on a simulated clock, scheduled from one seed.

* `SimWorld` is the scheduler. Code under test runs in *actors* (threads), and exactly one thread runs at a
  time: an actor runs until it sends a request or sleeps, then the scheduler takes the earliest pending
  event off its queue, moves the clock to it and carries it out. Every choice (latencies, which requests
  fail, which are held in flight) comes from the world's `random.Random(seed)`, so one seed is one
  interleaving, reproduced exactly by running it again.
* `SimClient` is the object store: the `formats.objclient.Client` that `formats.objstore.ObjectStorage`
  sends its requests to. A request *lands* (is applied to the objects, atomically: a create-if-absent
  tests for the object at that moment) some time after it is sent, and its response reaches the sender
  some time after that. `Faults` says how often a request fails before landing (a 503, a reset), lands
  but loses its response, or is held in flight for seconds (a network partition: it lands after requests
  sent later, possibly after the client gave up on it, as a real delayed PUT does).
* `SimTime` is the world's clock as the `formats.storage.RealTime` interface (`time`, `monotonic`,
  `sleep`): object ages and the storage's retry backoff run on simulated time.

A call from a thread that is not an actor (a test's set-up or its final check) is carried out at once,
with no latency and no fault. A `SimClient` without a world (``SimClient(clock=...)``) is a plain
in-memory store whose objects are stamped by that clock: a simulation on a simulated clock whose request
counts must not depend on how fast it runs (tools.simulate).
"""

from __future__ import annotations

import bisect
import dataclasses
import datetime
import heapq
import random
import threading
from collections.abc import Callable, Iterator
from typing import Any

from obstore.exceptions import GenericError, NotFoundError, PreconditionError

T = Any
SCHEDULER = "scheduler"  # whose turn it is when no actor runs
STUCK_S = 120.0  # real seconds an actor may run without yielding before the world reports it stuck


class SimStuckError(RuntimeError):
    """An actor stopped yielding: it waits on something outside the simulation (a deadlock)."""


@dataclasses.dataclass(frozen=True)
class Faults:
    """How requests misbehave, as probabilities per request (each drawn from the world's seed).

    `fail` before landing (the store never sees it: a 503 or a reset connection), `lost` response (it
    landed; the sender is told it failed), `hold` in flight for `hold_s` (a range of seconds: it lands late,
    after requests sent later). `latency_s` is the range of one direction's ordinary delay. A sender whose
    request takes longer than `timeout_s` (the HTTP client's timeout) gets a timeout error at that time,
    while the request itself may still land afterwards."""

    fail: float = 0.0
    lost: float = 0.0
    hold: float = 0.0
    hold_s: tuple[float, float] = (5.0, 25.0)
    latency_s: tuple[float, float] = (0.002, 0.030)
    timeout_s: float = 30.0


NO_FAULTS = Faults()


@dataclasses.dataclass(frozen=True)
class Fate:
    """What a script makes of one request (`SimWorld(script=...)`): held in flight for `hold_s` seconds,
    failed before it lands, or landed with its response lost."""

    hold_s: float | None = None
    fail: bool = False
    lose: bool = False


class _Actor:
    def __init__(self, world: SimWorld, name: str, body: Callable[[], None]) -> None:
        self.world = world
        self.name = name
        self.body = body
        self.error: BaseException | None = None
        self.done = False
        self.waiting = 0  # the id of the request it waits for
        self.reply: tuple[bool, Any] | None = None  # (ok, value or exception) of that request
        self.thread = threading.Thread(target=self._main, name=f"sim-{name}", daemon=True)

    def _main(self) -> None:
        w = self.world
        w._wait_turn(self)
        w._local.actor = self
        try:
            self.body()
        except BaseException as e:  # noqa: BLE001 - reported by SimWorld.run
            self.error = e
        finally:
            self.done = True
            w._hand_back()


class SimWorld:
    """The seeded scheduler and simulated clock of one simulation (module docstring).

    >>> w = SimWorld(7); seen = []
    >>> w.spawn("a", lambda: (w.sleep(2.0), seen.append(("a", w.now()))), at=1.0)
    >>> w.spawn("b", lambda: seen.append(("b", w.now())), at=2.5)
    >>> w.run(); seen == [("b", w.start + 2.5), ("a", w.start + 3.0)]
    True
    """

    def __init__(self, seed: int, faults: Faults = NO_FAULTS, start: float = 1_767_225_600.0,
                 script: Callable[[str, str, str], Fate | None] | None = None) -> None:
        self.seed = seed
        # a scripted fate for chosen requests (actor, kind, key) -> Fate or None: a test that needs one
        # interleaving exactly, without searching seeds for it
        self.script = script
        self.rng = random.Random(seed)
        self.faults = faults
        self.start = start
        self._now = start
        self._events: list[tuple[float, int, Callable[[], None]]] = []
        self._n = 0
        self._cv = threading.Condition(threading.Lock())
        self._turn: Any = SCHEDULER
        self._local = threading.local()
        self.actors: list[_Actor] = []
        self.requests = 0
        self.injected = {"held": 0, "failed": 0, "lost": 0, "timed_out": 0}  # faults dealt so far
        self.trace: list[tuple[float, str, str, str]] = []  # (time, actor, request kind, key): what ran

    # -- time ----------------------------------------------------------------------------------------
    def now(self) -> float:
        """Simulated seconds since the epoch."""
        return self._now

    def at(self, when: float, fn: Callable[[], None]) -> None:
        """Run `fn` in the scheduler at simulated time `when` (not before now)."""
        self._n += 1
        heapq.heappush(self._events, (max(when, self._now), self._n, fn))

    def sleep(self, seconds: float) -> None:
        """Wait `seconds` of simulated time (an actor yields; any other thread just moves the clock)."""
        actor = self._current()
        if actor is None:
            self._now += max(0.0, seconds)
            return
        self.at(self._now + max(0.0, seconds), lambda: self._resume(actor))
        self._yield(actor)

    # -- actors --------------------------------------------------------------------------------------
    def spawn(self, name: str, body: Callable[[], None], at: float | None = None) -> None:
        """Start `body()` as an actor at simulated offset `at` seconds from the start (default: now)."""
        actor = _Actor(self, name, body)
        self.actors.append(actor)
        actor.thread.start()
        self.at(self._now if at is None else self.start + at, lambda: self._resume(actor))

    def run(self, until: float | None = None) -> None:
        """Carry out events in time order until none is left (or the clock would pass `until`, offset
        seconds from the start); then every actor must be done. An actor's exception is raised here."""
        limit = None if until is None else self.start + until
        while self._events:
            when, _n, fn = self._events[0]
            if limit is not None and when > limit:
                break
            heapq.heappop(self._events)
            self._now = when
            fn()
        for a in self.actors:
            if a.error is not None:
                raise a.error

    def stuck(self) -> list[str]:
        """Names of actors that have not finished (waiting on something that will never come)."""
        return [a.name for a in self.actors if not a.done]

    def _current(self) -> _Actor | None:
        return getattr(self._local, "actor", None)

    def _wait_turn(self, actor: _Actor) -> None:
        with self._cv:
            while self._turn is not actor:
                self._cv.wait()

    def _yield(self, actor: _Actor) -> None:
        """The running actor gives the turn to the scheduler and waits for its own next turn."""
        with self._cv:
            self._turn = SCHEDULER
            self._cv.notify_all()
            while self._turn is not actor:
                self._cv.wait()

    def _hand_back(self) -> None:
        with self._cv:
            self._turn = SCHEDULER
            self._cv.notify_all()

    def _resume(self, actor: _Actor) -> None:
        """(scheduler) Let `actor` run until it yields again or finishes."""
        if actor.done:
            return
        with self._cv:
            self._turn = actor
            self._cv.notify_all()
            while self._turn is not SCHEDULER:
                if not self._cv.wait(STUCK_S):
                    raise SimStuckError(
                        f"seed {self.seed}: actor {actor.name} has not yielded for {STUCK_S} s of real time: it is "
                        "blocked outside the simulation (a lock another actor holds, a thread it waits for)")

    # -- requests ------------------------------------------------------------------------------------
    def request(self, kind: str, key: str, apply: Callable[[], T]) -> T:
        """Send one request: `apply()` runs when it lands (in the scheduler, atomically), its result or
        exception reaches the caller with the response. Faults as `self.faults` draws them."""
        actor = self._current()
        if actor is None:  # set-up or final checks: at once, no fault
            return apply()
        self.requests += 1
        rid = self.requests
        f, rng = self.faults, self.rng
        lo, hi = f.latency_s
        send, back = rng.uniform(lo, hi), rng.uniform(lo, hi)
        draw = rng.random()
        if draw < f.hold:
            send = rng.uniform(*f.hold_s)
        fail_before = f.hold <= draw < f.hold + f.fail
        lose = f.hold + f.fail <= draw < f.hold + f.fail + f.lost
        fate = self.script(actor.name, kind, key) if self.script is not None else None
        if fate is not None:
            send = send if fate.hold_s is None else fate.hold_s
            fail_before, lose = fate.fail, fate.lose
        sent, name = self._now, actor.name
        timed_out = send + back > f.timeout_s  # the client gives up before the response can come
        for what, dealt in (("held", send > hi), ("failed", fail_before), ("lost", lose), ("timed_out", timed_out)):
            self.injected[what] += dealt

        def land() -> None:
            self.trace.append((self._now, name, kind, key))
            try:
                out = (True, apply())
            except Exception as e:  # noqa: BLE001 - an answer of the store (not found, exists)
                out = (False, e)
            if lose:
                out = (False, GenericError(f"error sending request for {kind} {key}: connection reset (simulated)"))
            if not timed_out:
                self.at(self._now + back, lambda: self._reply(actor, rid, out))

        if fail_before:
            err = GenericError(
                f"Server returned non-2xx status code: 503 Service Unavailable: SlowDown ({kind} {key}, simulated)")
            if not timed_out:
                self.at(sent + send + back, lambda: self._reply(actor, rid, (False, err)))
        else:
            self.at(sent + send, land)  # lands even after the client gave up, as a delayed request does
        if timed_out:
            err = GenericError(f"error sending request for {kind} {key}: operation timed out (simulated)")
            self.at(sent + f.timeout_s, lambda: self._reply(actor, rid, (False, err)))
        actor.waiting, actor.reply = rid, None
        self._yield(actor)
        ok, value = actor.reply
        actor.waiting, actor.reply = 0, None
        if ok:
            return value
        raise value

    def _reply(self, actor: _Actor, rid: int, out: tuple[bool, Any]) -> None:
        if actor.waiting != rid or actor.done:
            return
        actor.reply = out
        self._resume(actor)


class SimTime:
    """A world's clock as the storage seam's clocks (`formats.storage.RealTime`'s interface)."""

    def __init__(self, world: SimWorld | None = None, now: Callable[[], float] | None = None) -> None:
        self.world = world
        self._now = now if now is not None else world.now

    def time(self) -> float:
        """Simulated seconds since the epoch."""
        return self._now()

    def monotonic(self) -> float:
        """The same simulated seconds (they never go back)."""
        return self._now()

    def sleep(self, seconds: float) -> None:
        """Wait on the simulated clock."""
        if self.world is not None:
            self.world.sleep(seconds)


@dataclasses.dataclass
class SimObject:
    """One stored object: its bytes, when it was written (simulated seconds) and its version tag."""

    data: bytes
    mtime: float
    etag: int


class SimClient:
    """The simulated object store (module docstring): `formats.objclient.Client` over a dict of objects."""

    def __init__(self, world: SimWorld | None = None, clock: Callable[[], float] | None = None) -> None:
        self.world = world
        self._clock = clock if clock is not None else (world.now if world is not None else None)
        if self._clock is None:
            raise ValueError("SimClient needs a world or a clock")
        self.objects: dict[str, SimObject] = {}
        self._keys: list[str] = []  # sorted, for listings
        self._tags = 0

    def _req(self, kind: str, key: str, apply: Callable[[], T]) -> T:
        if self.world is None:
            return apply()
        return self.world.request(kind, key, apply)

    def _obj(self, key: str) -> SimObject:
        o = self.objects.get(key)
        if o is None:
            raise NotFoundError(f"Object at location {key} not found (simulated)")
        return o

    def _store(self, key: str, data: bytes) -> None:
        if key not in self.objects:
            bisect.insort(self._keys, key)
        self._tags += 1
        self.objects[key] = SimObject(bytes(data), self._clock(), self._tags)

    def _meta(self, key: str, o: SimObject) -> dict[str, Any]:
        when = datetime.datetime.fromtimestamp(o.mtime, datetime.UTC)
        return {"path": key, "size": len(o.data), "last_modified": when, "e_tag": str(o.etag), "version": None}

    def _under(self, prefix: str) -> list[str]:
        i = bisect.bisect_left(self._keys, prefix)
        out = []
        while i < len(self._keys) and self._keys[i].startswith(prefix):
            out.append(self._keys[i])
            i += 1
        return out

    # -- Client ----------------------------------------------------------------------------------------
    def get(self, key: str) -> bytes:
        """The whole object."""
        return self._req("get", key, lambda: self._obj(key).data)

    def get_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes [start, end)."""
        return self._req("get", key, lambda: self._obj(key).data[start:end])

    def get_range_stream(self, key: str, start: int, end: int, chunk: int) -> Iterator[Any]:
        """Bytes [start, end) in chunks (one request)."""
        data = self.get_range(key, start, end)
        return iter([data[i : i + chunk] for i in range(0, len(data), chunk)] or [b""])

    def get_tail(self, key: str, nbytes: int) -> tuple[int, bytes, dict[str, Any]]:
        """(size, last `nbytes` bytes, metadata)."""

        def apply() -> tuple[int, bytes, dict[str, Any]]:
            o = self._obj(key)
            return len(o.data), o.data[-nbytes:] if nbytes else b"", self._meta(key, o)

        return self._req("get", key, apply)

    def head(self, key: str) -> int:
        """The object's size."""
        return self._req("head", key, lambda: len(self._obj(key).data))

    def list_pages(self, prefix: str, page: int) -> Iterator[list[dict[str, Any]]]:
        """Metadata of the objects under `prefix`, one request per page of `page`."""
        after = ""
        while True:

            def apply(after: str = after) -> list[dict[str, Any]]:
                keys = [k for k in self._under(prefix) if k > after][:page]
                return [self._meta(k, self.objects[k]) for k in keys]

            metas = self._req("list", prefix, apply)
            if metas:
                yield metas
            if len(metas) < page:
                return
            after = metas[-1]["path"]

    def list_with_delimiter(self, prefix: str | None) -> dict[str, Any]:
        """Objects and common prefixes one level under `prefix`."""
        base = (prefix.rstrip("/") + "/") if prefix else ""

        def apply() -> dict[str, Any]:
            objects, prefixes = [], []
            for k in self._under(base):
                rest = k[len(base) :]
                if "/" in rest:
                    p = base + rest.split("/", 1)[0]
                    if not prefixes or prefixes[-1] != p:
                        prefixes.append(p)
                else:
                    objects.append(self._meta(k, self.objects[k]))
            return {"common_prefixes": prefixes, "objects": objects}

        return self._req("list", base, apply)

    def put(self, key: str, data: Any, multipart: bool, chunk_size: int) -> None:
        """Write the object (replacing any)."""
        data = bytes(data)
        self._req("put", key, lambda: self._store(key, data))

    def put_create(self, key: str, data: bytes) -> None:
        """Write the object only if it does not exist, decided when the request lands."""
        data = bytes(data)

        def apply() -> None:
            if key in self.objects:
                raise PreconditionError(f"Object at location {key} exists: precondition failed (simulated)")
            self._store(key, data)

        self._req("put", key, apply)

    def delete(self, key: str) -> None:
        """Remove the object (one that is gone already is fine, as on S3)."""

        def apply() -> None:
            if self.objects.pop(key, None) is not None:
                self._keys.remove(key)

        self._req("delete", key, apply)
