"""The RL loop on several processes: process 0 leads, the others follow its trainer calls.

Process 0 runs the loop: rollouts, the proxy, the engine and the tracker. The trainer spans every
process's devices (train/distributed.py), so every call that runs a program on the global mesh, gathers
from it or saves it with orbax must be made by every process, the same calls in the same order. The loop
does not know: it calls `parts.trainer.update`, `parts.checkpointer.maybe_save / wait` and
`parts.publisher.publish` as it does on one process, and on process 0 of several those are the `Leading*`
subclasses below, which first tell the others what comes, then make the call.

Contract:
- `Commands(client=None)`: an ordered stream of small JSON commands (a kind and its arguments) through the
  coordination service's key-value store, `legorl/command/<n>`: `send(kind, **fields)` on process 0,
  `receive()` on the others. A follower waiting for its next command is inside no device collective, so
  process 0 can spend minutes on rollouts while the followers hold nothing open; it waits as long as that
  takes (a process that dies or fails is the `PeerWatchdog`'s business: it ends the waiting processes
  naming it).
- `LeadingTrainer` (a `Trainer`): `update(state, batch, stats)` sends `update`, shares the packed batch
  (`distributed.share_batch`: its bytes through one broadcast, so every process builds its own shards),
  then updates.
- `LeadingCheckpointer` (a `Checkpointer`): a save process 0 decides on (due, and within the time budget it
  measures) sends `save` with its arguments, forced, and each process writes its own shards; `wait()` sends
  `wait`.
- `LeadingPublisher` (a `Publisher`): `publish(params, version)` sends `publish`, gathers the parameters
  onto process 0 one leaf at a time (`distributed.gather_params`, never the optimiser state) and publishes
  those host arrays to the engine, which lives on process 0 alone.
- `follow(commands, trainer, checkpointer, state) -> Followed`: a follower's side: each command answered by
  the same call on its own state, until `stop`.
- What comes before the loop is built the same way on every process (`legorl_jax.run`): process 0 sends
  `start` with the model directory (after its warm start, if any, which trains on process 0's first device
  alone and so is no collective), then every process builds the trainer, `init_state`, and on a resume
  restores the checkpoint, in that order.

Only these calls are followed: a loop that ran another mesh program on process 0 (say
`Trainer.old_logprobs`) would wait for followers that never run it. Two settings of `distributed.initialize`
make the same calls meet: orbax's barriers go through the key-value store (a background save cannot
interleave device-collective barriers with the train step's differently on different processes), and
compiled programs carry no Python call stack (process 0 reaches `Trainer.update` from the loop, the others
from `follow`; with the call stacks in the programs their launch ids differ and the first collective
hangs).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections import Counter
from typing import Any

from legorl_jax.train import distributed
from legorl_jax.train.batch import PackStats
from legorl_jax.train.checkpoint import Checkpointer
from legorl_jax.train.publish import Publisher
from legorl_jax.train.state import TrainState
from legorl_jax.train.step import Trainer, UpdateResult
from legorl_jax.types import TrainBatch

log = logging.getLogger(__name__)

KINDS = ("start", "update", "save", "wait", "publish", "stop")
_KEY = "legorl/command/{}"
_POLL_MS = 60_000


@dataclasses.dataclass(frozen=True)
class Command:
    """One call process 0 makes next: its kind (one of `KINDS`) and its arguments."""

    kind: str
    fields: dict[str, Any]

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"command kind must be one of {KINDS}, got {self.kind!r}")


class Commands:
    """Process 0's calls, in order, for the other processes (module docstring)."""

    def __init__(self, client: Any = None) -> None:
        self._client = client
        self._next = 0

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = distributed.store_client()
        return self._client

    def send(self, kind: str, **fields: Any) -> None:
        command = Command(kind, fields)
        self.client.key_value_set(_KEY.format(self._next), json.dumps({"kind": kind, **command.fields}))
        self._next += 1

    def receive(self) -> Command:
        """The next command; waits for it as long as process 0 takes."""
        key = _KEY.format(self._next)
        while True:
            try:
                text = self.client.blocking_key_value_get(key, _POLL_MS)
                break
            except Exception as exc:
                if "DEADLINE_EXCEEDED" not in str(exc):
                    raise
        self._next += 1
        fields = json.loads(text)
        return Command(fields.pop("kind"), fields)


class LeadingTrainer(Trainer):
    """A `Trainer` on process 0 whose `update` the other processes follow (module docstring)."""

    def __init__(self, *args: Any, commands: Commands, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands = commands

    def update(
        self,
        state: TrainState,
        batch: TrainBatch,
        pack_stats: PackStats | None = None,
        *,
        trainer_version: int | None = None,
    ) -> tuple[TrainState, UpdateResult]:
        """`Trainer.update`, the followers told first. `trainer_version` feeds host-side figures only (the
        per-version-gap ones), so the followers need not know it."""
        if batch.rows % self.row_multiple:  # refused here, before the followers are told to expect it
            return super().update(state, batch, pack_stats, trainer_version=trainer_version)
        self.commands.send("update")
        distributed.share_batch(batch)
        return super().update(state, batch, pack_stats, trainer_version=trainer_version)


class LeadingCheckpointer(Checkpointer):
    """A `Checkpointer` on process 0 whose saves and waits the other processes follow."""

    def __init__(self, *args: Any, commands: Commands, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands = commands

    def _save(self, state: TrainState, *, cursor: dict[str, Any], weights_version: str, step: int) -> None:
        # Only a save process 0 decided on is sent, forced: the time budget (train/checkpoint.py) is measured
        # here, and a follower deciding on its own clock could skip a collective save process 0 makes.
        self.commands.send("save", cursor=cursor, weights_version=weights_version, force=True, step=step)
        super()._save(state, cursor=cursor, weights_version=weights_version, step=step)

    def wait(self) -> None:
        self.commands.send("wait")
        super().wait()


class LeadingPublisher(Publisher):
    """A `Publisher` on process 0 that gathers the parameters from every process before publishing."""

    def __init__(self, *args: Any, commands: Commands, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands = commands

    async def publish(self, params: Any, version: str) -> Any:
        self.commands.send("publish", version=version)
        return await super().publish(distributed.gather_params(params), version)


@dataclasses.dataclass
class Followed:
    """What a follower did: its last state and how many commands of each kind it followed."""

    state: TrainState
    counts: Counter[str]


def follow(commands: Commands, trainer: Trainer, checkpointer: Checkpointer, state: TrainState) -> Followed:
    """Makes process 0's trainer calls on this process's `state` until `stop` (module docstring)."""
    counts: Counter[str] = Counter()
    while True:
        command = commands.receive()
        counts[command.kind] += 1
        if command.kind == "stop":
            return Followed(state, counts)
        if command.kind == "update":
            state, _ = trainer.update(state, distributed.share_batch(None))
        elif command.kind == "save":
            checkpointer.maybe_save(state, **command.fields)
        elif command.kind == "wait":
            checkpointer.wait()
        elif command.kind == "publish":
            distributed.gather_params(state.params)
        else:
            raise ValueError(f"follow: process 0 sent {command.kind!r} in the middle of the loop")
        log.debug("followed %s %s", command.kind, command.fields)
