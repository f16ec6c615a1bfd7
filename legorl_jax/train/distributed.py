"""The trainer over several processes: joining the run, the global mesh, feeding it, reading from it, and
stopping when a peer is lost.

JAX runs one program over many processes (usually one per host), each owning its local devices; a mesh
spans every process's devices and a global array holds, on each process, only the shards of its devices.

Contract:
- `initialize(config: DistributedConfig) -> Processes`: joins the run (`jax.distributed.initialize`;
  fields left null are detected from the environment: SLURM, Open MPI, Kubernetes, Cloud TPU). On CPU the
  processes talk through gloo (JAX's default `jax_cpu_collectives_implementation`), so N processes with
  `cpu_devices` each run on one machine over 127.0.0.1. Must run before anything touches a device. A
  disabled config returns the single-process `Processes` without touching JAX. With more than one
  process it starts a `PeerWatchdog`, makes orbax's barriers go through the key-value store (see
  `_orbax_barriers_through_the_store`) and keeps call stacks out of compiled programs (see
  `_programs_independent_of_the_call_stack`: otherwise a program called from different code on two
  processes never meets in its collectives). Calling it again with the same config returns the same
  `Processes`.
- `global_mesh(mesh_config)`: `make_mesh` over every process's devices (`jax.devices()` is global once
  initialised, ordered by process), with the same axis sizes and rules as one process. Processes sit on
  the leading mesh axes (data, then fsdp), so the axes that cross hosts are the ones whose collectives
  are the gradient reductions and weight gathers, not the tensor and expert exchanges of every layer.
- `share(tree)`: process 0's host arrays (a dict of name -> numpy array or None) reach every process:
  names, shapes and dtypes through the coordination service's key-value store, the bytes through
  `multihost_utils.broadcast_one_to_all` (a device collective). Other processes pass None. Every
  process must call it the same number of times (it is a collective).
  `share_batch(batch)` does it for a packed `TrainBatch` (the loop's batch: process 0 packs it).
- `place(host, sharding)`: a global array whose local shards each process cuts from its own copy of
  the same host array (`jax.make_array_from_callback`): no process sends another anything. `put(tree,
  shardings)` is `jax.device_put` on one process and `place` per leaf on several.
- `to_host(x)`: a full numpy copy of a global array on every process, gathered across processes
  (`process_allgather`) when its shards are not all local. A collective when it gathers.
- `gather_params(params)`: the parameters (never the optimiser state) as host arrays on process 0, for
  `save_hf` / publishing, which only process 0 does.
- `PeerWatchdog`: every process writes a heartbeat counter to the key-value store every
  `peer_timeout_s / 10` seconds and reads the others'. A peer whose counter stops for `peer_timeout_s`
  (or the coordinator, process 0, when the store itself stops answering) is lost: the watchdog logs an
  error naming it and ends this process with exit status `PEER_LOST_EXIT` (a thread cannot raise into a
  main thread blocked inside a collective, so the process ends itself; no process hangs on a dead
  peer). A process that exits normally writes `done` first, so its peers do not count it as lost; one that
  ends on an exception writes `failed: <the error>` (`PeerWatchdog.fail`), and its peers stop at once naming
  it and the error (a peer waiting for it in a collective or for its next command would wait forever). JAX's
  own heartbeat (which aborts with a less direct message) is set to twice the timeout, so ours fires
  first.
- `telling_peers_of_failure(processes)`: a block whose exception is told to the peers (`PeerWatchdog.fail`).
  A `JaxRuntimeError` is first held for up to the peer timeout: a collective fails at once when its peer
  dies (gloo sees the connection close) while the peer's heartbeat is not stale yet, and the error to
  report is the lost peer's name (the watchdog's), not the collective's.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, Sharding

from legorl_jax.config import DistributedConfig, MeshConfig
from legorl_jax.model.sharding import make_mesh
from legorl_jax.types import TrainBatch

log = logging.getLogger(__name__)

PEER_LOST_EXIT = 75  # EX_TEMPFAIL: the job can be resumed from its last checkpoint
_HEARTBEAT_KEY = "legorl/heartbeat/{}"
_DONE = "done"
_FAILED = "failed: "


@dataclasses.dataclass(frozen=True)
class Processes:
    """Where this process stands in the run."""

    process_id: int = 0
    num_processes: int = 1
    watchdog: PeerWatchdog | None = None

    @property
    def is_main(self) -> bool:
        """Process 0: the one that runs rollouts, the proxy, the tracker and writes shared files."""
        return self.process_id == 0


_joined: tuple[DistributedConfig, Processes] | None = None


def initialize(config: DistributedConfig) -> Processes:
    """Joins the multi-process run `config` describes (module docstring); single-process when disabled."""
    global _joined
    if not isinstance(config, DistributedConfig):
        raise TypeError(f"initialize needs a DistributedConfig, got {type(config).__name__}")
    if not config.enabled:
        return Processes()
    if _joined is not None:
        if _joined[0] != config:
            raise ValueError(
                f"this process already joined a run as {_joined[0]}; it cannot join another ({config})"
            )
        return _joined[1]
    if config.cpu_devices is not None:
        jax.config.update("jax_num_cpu_devices", config.cpu_devices)
    jax.distributed.initialize(
        coordinator_address=config.coordinator_address,
        num_processes=config.num_processes,
        process_id=config.process_id,
        local_device_ids=config.local_device_ids,
        initialization_timeout=config.initialization_timeout_s,
        heartbeat_timeout_seconds=max(10, int(2 * config.peer_timeout_s)),
    )
    process_id, num_processes = jax.process_index(), jax.process_count()
    watchdog = None
    if num_processes > 1:
        watchdog = PeerWatchdog(process_id, num_processes, config.peer_timeout_s)
        watchdog.start()
        # Registered after jax.distributed's own shutdown hook, so it runs before it (atexit is LIFO).
        atexit.register(watchdog.stop)
        _orbax_barriers_through_the_store()
        _programs_independent_of_the_call_stack()
    log.info(
        "process %d of %d: %d local devices of %d",
        process_id,
        num_processes,
        jax.local_device_count(),
        jax.device_count(),
    )
    processes = Processes(process_id, num_processes, watchdog)
    _joined = (config, processes)
    return processes


@contextlib.contextmanager
def telling_peers_of_failure(processes: Processes) -> Iterator[None]:
    """Runs the block; if it raises, the peers are told this process failed and why (`PeerWatchdog.fail`)
    before the error goes on, so none of them waits for this process in a collective or for a command."""
    try:
        yield
    except BaseException as exc:
        if processes.watchdog is not None and not isinstance(exc, GeneratorExit):
            if isinstance(exc, jax.errors.JaxRuntimeError):
                # A collective whose peer died fails at once (gloo: connection closed), before the peer's
                # heartbeat is stale: give the watchdog the time to name the peer (it ends this process).
                processes.watchdog.wait_for_a_lost_peer()
            processes.watchdog.fail(exc)
        raise


def _programs_independent_of_the_call_stack() -> None:
    """Compiled programs that are the same on every process whatever Python code called them.

    JAX writes the Python traceback of each traced operation into the program's locations, and the
    program's fingerprint covers them; the fingerprint (with the devices') seeds the launch id each
    execution carries, and the processes' executions of one collective program meet only when their launch
    ids agree. Process 0 calls the trainer from the loop and the others from `follow` (train/commands.py):
    with full tracebacks every cross-process program hangs in its first collective (measured: gloo's
    all-reduce waiting on both sides). Kept: the innermost frame, which is the trainer's own code, with its
    file path removed (hosts may hold the checkout at different paths).
    """
    jax.config.update("jax_include_full_tracebacks_in_locations", False)
    jax.config.update("jax_hlo_source_file_canonicalization_regex", ".*")


def _orbax_barriers_through_the_store() -> None:
    """Orbax's barriers as key-value store barriers instead of device collectives.

    By default orbax synchronises processes with `multihost_utils.sync_global_devices`, a program over
    every device, some of them from its background threads (async saves, directory creation). A device
    collective started from another thread can reach one process before a train step and another after
    it; each process then waits in a different collective for the other: the job hangs. The store's
    barriers are matched by name, not by launch order. (`experimental_orbax_use_distributed_barrier` is
    an absl flag that nothing parses in this program, so it is set as parsed here.)
    """
    from absl import flags
    from orbax.checkpoint._src.multihost import multihost as orbax_multihost

    flag = flags.FLAGS[orbax_multihost.EXPERIMENTAL_ORBAX_USE_DISTRIBUTED_BARRIER.name]
    flag.value, flag.present = True, 1


def global_mesh(mesh_config: MeshConfig) -> Mesh:
    """The mesh of `mesh_config` over every process's devices (module docstring), or over those
    `mesh.devices` names (indices into `jax.devices()`: the trainer's when the engine has the others)."""
    return make_mesh(mesh_config)


def store_client() -> Any:
    """The coordination service's key-value store client of this process (jax.distributed)."""
    from jax._src import distributed as jax_distributed

    client = jax_distributed.global_state.client
    if client is None:
        raise RuntimeError("jax.distributed is not initialised: call legorl_jax.train.distributed.initialize")
    return client


_shared_count = 0


def share(tree: dict[str, np.ndarray | None] | None) -> dict[str, np.ndarray | None]:
    """Process 0's `tree` on every process (module docstring); others pass None. Single process: `tree`."""
    global _shared_count
    if jax.process_count() == 1:
        if tree is None:
            raise ValueError("share: the only process must pass the arrays, got None")
        return tree
    is_main = jax.process_index() == 0
    if is_main != (tree is not None):
        raise ValueError(
            f"share: process 0 passes the arrays and the others None; process {jax.process_index()} "
            f"passed {'None' if tree is None else 'arrays'}"
        )
    key = f"legorl/shared/{_shared_count}"
    _shared_count += 1
    client = store_client()
    if tree is not None:  # process 0
        header = {
            k: None if v is None else [list(np.shape(v)), np.asarray(v).dtype.str] for k, v in tree.items()
        }
        client.key_value_set(key, json.dumps(header))
        arrays = {k: np.asarray(v) for k, v in tree.items() if v is not None}
    else:
        header = json.loads(client.blocking_key_value_get(key, 600_000))
        arrays = {k: np.zeros(s, np.dtype(d)) for k, (s, d) in ((k, v) for k, v in header.items() if v)}
    received = multihost_utils.broadcast_one_to_all(arrays, is_source=is_main)
    return {k: None if header[k] is None else np.asarray(received[k]) for k in header}


def share_batch(batch: TrainBatch | None) -> TrainBatch:
    """Process 0's packed `batch` on every process (`share` of its fields); the others pass None."""
    names = [f.name for f in dataclasses.fields(TrainBatch)]
    tree = None if batch is None else {k: getattr(batch, k) for k in names}
    # None only where the batch has None (routed_experts of a dense model): TrainBatch's own Optional fields.
    return TrainBatch(**share(tree))  # type: ignore[arg-type]


def place(host: np.ndarray, sharding: Sharding) -> jax.Array:
    """A global array of `host` on `sharding`, each process filling only its own devices' shards."""
    host = np.asarray(host)
    return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])


def put(tree: Any, shardings: Any) -> Any:
    """`jax.device_put(tree, shardings)` that also works when the shardings span several processes (there,
    every leaf goes through `place`: each process must hold the same values)."""
    if jax.process_count() == 1 or shardings is None:
        return jax.device_put(tree, shardings)
    return jax.tree.map(lambda x, s: place(np.asarray(jax.device_get(x)), s), tree, shardings)


def to_host(x: jax.Array | np.ndarray) -> np.ndarray:
    """The full value of `x` as numpy on this process, gathered from the others when needed."""
    if not isinstance(x, jax.Array) or x.is_fully_addressable or x.is_fully_replicated:
        return np.asarray(jax.device_get(x))
    return np.asarray(multihost_utils.process_allgather(x, tiled=True))


def gather_params(params: Any) -> Any | None:
    """The full parameters as host numpy arrays on process 0 (None on the others), one leaf at a time, so
    no process ever holds more than one gathered leaf it does not keep; the optimiser state is never
    gathered. Every process must call it (a collective)."""
    is_main = jax.process_index() == 0
    leaves, treedef = jax.tree.flatten(params)
    host = []
    for leaf in leaves:
        value = to_host(leaf)
        host.append(value if is_main else None)
        del value
    return jax.tree.unflatten(treedef, host) if is_main else None


class PeerWatchdog:
    """Ends this process with an error naming a peer that stopped (module docstring)."""

    def __init__(self, process_id: int, num_processes: int, timeout_s: float, *, client: Any = None) -> None:
        self.process_id, self.num_processes, self.timeout_s = process_id, num_processes, float(timeout_s)
        self._client = client
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="legorl-peer-watchdog", daemon=True)
        self.lost: str | None = None
        started = time.monotonic()
        self._beat = 0
        self._store_ok_at = started
        self._last_seen: dict[int, tuple[str | None, float]] = {
            p: (None, started) for p in range(num_processes) if p != process_id
        }

    def start(self) -> None:
        if self._client is None:
            self._client = store_client()
        self._thread.start()

    def wait_for_a_lost_peer(self) -> None:
        """Waits up to the timeout (and two polls) for a peer to be found lost; the watchdog then ends the
        process naming it. Returns if none is."""
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=self.timeout_s * 1.2 + 1.0)

    def stop(self) -> None:
        """Tells the peers this process ended normally, and stops watching."""
        self._end(_DONE)

    def fail(self, error: BaseException | str) -> None:
        """Tells the peers this process ends on `error`, so they stop too, and stops watching."""
        text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
        self._end(_FAILED + " ".join(text.split())[:500])

    def _end(self, value: str) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        try:
            self._client.key_value_set(_HEARTBEAT_KEY.format(self.process_id), value, allow_overwrite=True)
        except Exception:  # the coordinator may already be gone at exit; nothing left to tell
            pass
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=self.timeout_s)

    def _run(self) -> None:
        interval = max(0.05, self.timeout_s / 10)
        while not self._stop.is_set():
            lost = self.check(time.monotonic())
            if lost is not None:
                self._lose(*lost)
                return
            self._stop.wait(interval)

    def check(self, now: float) -> tuple[int, str] | None:
        """One heartbeat out and one look at the peers' at time `now` (monotonic seconds): the lost peer
        and why, or None."""
        try:
            self._beat += 1
            self._client.key_value_set(
                _HEARTBEAT_KEY.format(self.process_id), str(self._beat), allow_overwrite=True
            )
            values = {p: self._try_get(_HEARTBEAT_KEY.format(p)) for p in self._last_seen}
        except Exception as exc:  # the store lives in process 0: it stopped answering
            if self.process_id != 0 and now - self._store_ok_at > self.timeout_s:
                return 0, f"the coordination service it hosts stopped answering ({exc})"
            return None
        self._store_ok_at = now
        for peer, value in values.items():
            seen, since = self._last_seen[peer]
            if value == _DONE:
                continue
            if value is not None and value.startswith(_FAILED):
                return peer, f"it {value}"
            if value != seen:
                self._last_seen[peer] = (value, now)
            elif now - since > self.timeout_s:
                what = "never sent a heartbeat" if value is None else f"last heartbeat {value}"
                return peer, f"no heartbeat for {now - since:.1f} s ({what})"
        return None

    def _try_get(self, key: str) -> str | None:
        try:
            return self._client.key_value_try_get(key)
        except Exception as exc:
            if "NOT_FOUND" in str(exc) or "not found" in str(exc).lower():
                return None
            raise

    def _lose(self, peer: int, why: str) -> None:
        self.lost = (
            f"lost peer process {peer} of {self.num_processes}: {why}; process {self.process_id} stops "
            f"(peer timeout {self.timeout_s:g} s). Restart the job; resume=true continues from the last "
            "checkpoint."
        )
        log.error(self.lost)
        if not log.hasHandlers():
            print(f"legorl_jax: {self.lost}", file=sys.stderr, flush=True)
        os._exit(PEER_LOST_EXIT)
