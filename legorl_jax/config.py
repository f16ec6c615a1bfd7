"""Structured-config dataclasses: the schemas of `conf/` (docs/style.md rules 6-8).

Each Hydra group `conf/<group>/` has one dataclass here, registered in Hydra's ConfigStore by
`register_configs()` (called by the entry points, never at import). YAML files hold presets only. Every
field has a one-line docstring (the string literal under it); `__post_init__` validates and raises a
`ValueError` naming the received value. Components receive their own sub-config, never the root.
`flatten_config` gives a resolved config's dotted keys (tracker hyper-parameters, the resume check, run
comparison).

Sections are owned by the issue that builds the group; add fields, never rename them.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from legorl_jax.validate import is_int, positive_int, positive_number

log = logging.getLogger(__name__)

# ----------------------------------------------------------------------------------------------------
# model/ and mesh/ (foundation issue)
# ----------------------------------------------------------------------------------------------------

_DTYPES = ("float32", "bfloat16", "float16")


@dataclasses.dataclass
class ModelConfig:
    """Which checkpoint the policy is loaded from and how it computes."""

    path: str = "runs/tiny-moe"
    """HF model directory (config.json + safetensors + tokenizer); any Qwen3 / Qwen3-MoE checkpoint."""
    dtype: str = "float32"
    """Parameter dtype after loading (float32 master weights; bfloat16 for inference-only use)."""
    compute_dtype: str = "float32"
    """Activation/matmul dtype inside the forward (bfloat16 with float32 params = mixed precision)."""
    scan_layers: bool = True
    """Run identical consecutive decoder layers under one `nnx.scan` (off for step-through debugging)."""
    remat: bool = False
    """Recompute each layer's activations in the backward (gradient checkpointing)."""

    def __post_init__(self) -> None:
        for name in ("dtype", "compute_dtype"):
            value = getattr(self, name)
            if value not in _DTYPES:
                raise ValueError(f"model.{name} must be one of {_DTYPES}, got {value!r}")
        for name in ("scan_layers", "remat"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"model.{name} must be true or false, got {getattr(self, name)!r}")
        if not isinstance(self.path, str) or not self.path:
            raise ValueError(f"model.path must be an HF model directory, got {self.path!r}")


MESH_AXES = ("data", "fsdp", "tensor", "expert", "context")
# The closed vocabulary of logical axes model code names (docs/style.md rule 10); legorl_jax/model/sharding.py
# maps them to MESH_AXES.
LOGICAL_AXES = ("batch", "seq", "embed", "heads", "kv_heads", "head_dim", "mlp", "experts", "vocab", "layers")


@dataclasses.dataclass
class DistributedConfig:
    """One JAX program over several processes (`jax.distributed`; legorl_jax/train/distributed.py)."""

    enabled: bool = False
    """Join a multi-process run; every field left null is detected from the environment as
    `jax.distributed.initialize()` does (SLURM, Open MPI, Kubernetes, Cloud TPU)."""
    coordinator_address: str | None = None
    """host:port of process 0's coordination service, reachable from every process."""
    num_processes: int | None = None
    """How many processes (usually hosts) the run spans."""
    process_id: int | None = None
    """This process's index, 0 .. num_processes - 1 (0 runs rollouts, the proxy and the tracker)."""
    local_device_ids: list[int] | None = None
    """The accelerators this process owns (null: all it sees)."""
    cpu_devices: int | None = None
    """CPU devices per process (tests, laptops: `jax_num_cpu_devices`); null leaves JAX's default."""
    initialization_timeout_s: int = 300
    """How long a process waits for the others to join before failing."""
    peer_timeout_s: float = 60.0
    """A peer silent this long is lost: every other process exits with an error naming it."""

    def __post_init__(self) -> None:
        if not isinstance(self.enabled, bool):
            raise ValueError(f"mesh.distributed.enabled must be true or false, got {self.enabled!r}")
        address = self.coordinator_address
        if address is not None:
            host, _, port = address.rpartition(":") if isinstance(address, str) else ("", "", "")
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"mesh.distributed.coordinator_address must be host:port, got {address!r}")
        if self.num_processes is not None:
            positive_int("mesh.distributed.num_processes", self.num_processes)
        if self.process_id is not None and (not is_int(self.process_id) or self.process_id < 0):
            raise ValueError(f"mesh.distributed.process_id must be an int >= 0, got {self.process_id!r}")
        if self.num_processes is not None and self.process_id is not None:
            if self.process_id >= self.num_processes:
                raise ValueError(
                    f"mesh.distributed.process_id={self.process_id} is not below "
                    f"num_processes={self.num_processes}"
                )
        for device in self.local_device_ids or ():
            if not is_int(device) or device < 0:
                raise ValueError(
                    f"mesh.distributed.local_device_ids must be ints >= 0, got {self.local_device_ids!r}"
                )
        if self.cpu_devices is not None:
            positive_int("mesh.distributed.cpu_devices", self.cpu_devices)
        positive_int("mesh.distributed.initialization_timeout_s", self.initialization_timeout_s)
        positive_number("mesh.distributed.peer_timeout_s", self.peer_timeout_s, unit="seconds")


@dataclasses.dataclass
class MeshConfig:
    """Device mesh shape and the logical-axis → mesh-axis rules table (docs/style.md rule 10)."""

    data: int = 1
    """Pure data-parallel replicas."""
    fsdp: int = -1
    """Fully-sharded data parallel; -1 takes every device the other axes leave."""
    tensor: int = 1
    """Tensor (megatron-style) parallelism over heads / mlp / vocab."""
    expert: int = 1
    """Expert parallelism over the MoE experts axis."""
    context: int = 1
    """Context parallelism: each packed row split along its tokens over this many devices (the logical
    `seq` axis; model/context_parallel.py). Rows must be a multiple of 2 x context tokens."""
    rules: list[Any] | None = None
    """Overrides of the logical axis rules: a list of [logical_axis, mesh_axis | [mesh_axes] | null]."""
    distributed: DistributedConfig = dataclasses.field(default_factory=DistributedConfig)
    """Several processes (hosts) in one mesh; off: this process's devices only."""
    devices: list[int] | None = None
    """Indices (into `jax.devices()`) of the devices the trainer's mesh takes; null: every device. Async
    training on one host gives the others to the rollout engine (`engine.device`, `engine.sglang.gpus`)."""

    def __post_init__(self) -> None:
        if self.devices is not None and (
            not isinstance(self.devices, list | tuple)
            or not self.devices
            or not all(is_int(d) and d >= 0 for d in self.devices)
            or len(set(self.devices)) != len(self.devices)
        ):
            raise ValueError(
                f"mesh.devices must be distinct device indices >= 0 or null, got {self.devices!r}"
            )
        for name in MESH_AXES:
            value = getattr(self, name)
            if not is_int(value) or (value < 1 and not (name == "fsdp" and value == -1)):
                raise ValueError(f"mesh.{name} must be a positive int (fsdp may be -1), got {value!r}")
        for entry in self.rules or ():
            if not isinstance(entry, (list, tuple)) or len(entry) != 2 or entry[0] not in LOGICAL_AXES:
                raise ValueError(
                    f"mesh.rules entries must be [logical_axis in {LOGICAL_AXES}, mesh_axes], got {entry!r}"
                )
            targets = [entry[1]] if entry[1] is None or isinstance(entry[1], str) else list(entry[1])
            if any(t is not None and t not in MESH_AXES for t in targets):
                raise ValueError(f"mesh.rules entry {entry!r} names a mesh axis outside {MESH_AXES}")


# ----------------------------------------------------------------------------------------------------
# algo/ and train/ (trainer issue)
# ----------------------------------------------------------------------------------------------------

ALGO_LOSSES = ("gspo", "ppo", "cispo")
LOSS_AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")
ADVANTAGE_STDS = ("unbiased", "biased", "none")
TIS_LEVELS = ("none", "token", "sequence")
MIS_LEVELS = ("none", "token", "sequence", "geometric")


@dataclasses.dataclass
class AlgoConfig:
    """The policy-gradient algorithm: advantages, loss, aggregation, mismatch correction, KL."""

    loss: str = "gspo"
    """Policy loss: gspo (sequence ratio, GSPO-token form), ppo (token-level clip) or cispo."""
    clip_low: float = 3e-4
    """Lower clip ε: the ratio is clipped at 1 - clip_low (cispo: 1.0 removes the lower bound)."""
    clip_high: float = 4e-4
    """Upper clip ε: the ratio is clipped at 1 + clip_high."""
    dual_clip: float | None = None
    """PPO dual clip c > 1: for A < 0 the loss is capped at -A·c (None: off)."""
    loss_agg: str = "seq-mean-token-mean"
    """Aggregation: token-mean, seq-mean-token-mean or seq-mean-token-sum-norm (per packed segment)."""
    agg_norm_length: int | None = None
    """Constant length of seq-mean-token-sum-norm (None: train.max_tokens)."""
    advantage_std: str = "unbiased"
    """Group std in the advantage: unbiased (ddof 1, verl), biased (ddof 0) or none (Dr. GRPO)."""
    negative_weight: float = 1.0
    """Weight of negative advantages, in [0, 1]: 1 is the symmetric GRPO objective; below 1 the trials worse
    than their group's mean are pushed down less (0: only the better ones are reinforced). On a small model
    the failed trials' unlikely tokens dominate the gradient and their push-down can wreck what the rest
    knows (`experiment=demo`)."""
    temperature: float = 1.0
    """Sampling temperature of the rollouts; the trainer's log-probs use the same value."""
    tis: str = "token"
    """Truncated IS on π_old/μ: none, token (min(exp(lp_old - lp_rollout), C)) or sequence."""
    tis_cap: float = 2.0
    """The truncation C of the IS weight."""
    mis: str = "none"
    """Masked (rejection) IS: none, token, sequence or geometric; rejected tokens leave the loss."""
    mis_high: float = 2.0
    """Upper bound of the accepted IS ratio (geometric: e.g. 1.001)."""
    mis_low: float | None = None
    """Lower bound of the accepted IS ratio (None: 1 / mis_high)."""
    kl_coef: float = 0.0
    """Coefficient of the k3 KL to the frozen reference policy (0: no reference is kept)."""
    aux_loss_coef: float = 0.0
    """Coefficient of the MoE load-balancing auxiliary loss."""

    @property
    def mis_lower(self) -> float:
        """The lower rejection bound actually used."""
        return 1.0 / self.mis_high if self.mis_low is None else self.mis_low

    def __post_init__(self) -> None:
        for name, allowed in (
            ("loss", ALGO_LOSSES),
            ("loss_agg", LOSS_AGGREGATIONS),
            ("advantage_std", ADVANTAGE_STDS),
            ("tis", TIS_LEVELS),
            ("mis", MIS_LEVELS),
        ):
            if getattr(self, name) not in allowed:
                raise ValueError(f"algo.{name} must be one of {allowed}, got {getattr(self, name)!r}")
        if not 0.0 <= self.clip_low <= 1.0:
            raise ValueError(f"algo.clip_low must lie in [0, 1], got {self.clip_low!r}")
        if not self.clip_high > 0.0:
            raise ValueError(f"algo.clip_high must be > 0, got {self.clip_high!r}")
        if self.dual_clip is not None and not self.dual_clip > 1.0:
            raise ValueError(f"algo.dual_clip must be > 1 or null, got {self.dual_clip!r}")
        if self.agg_norm_length is not None:
            positive_int("algo.agg_norm_length", self.agg_norm_length)
        if (
            isinstance(self.negative_weight, bool)
            or not isinstance(self.negative_weight, int | float)
            or not 0.0 <= self.negative_weight <= 1.0
        ):
            raise ValueError(f"algo.negative_weight must lie in [0, 1], got {self.negative_weight!r}")
        for name in ("temperature", "tis_cap", "mis_high"):
            if not getattr(self, name) > 0.0:
                raise ValueError(f"algo.{name} must be > 0, got {getattr(self, name)!r}")
        if not 0.0 < self.mis_lower < self.mis_high:
            raise ValueError(f"algo.mis_low must lie in (0, mis_high={self.mis_high}), got {self.mis_low!r}")
        for name in ("kl_coef", "aux_loss_coef"):
            if not getattr(self, name) >= 0.0:
                raise ValueError(f"algo.{name} must be >= 0, got {getattr(self, name)!r}")


def _default_resume_ignores() -> list[str]:
    return ["train.total_steps", "train.checkpoint.*", "mesh.*", "tracking.*"]


@dataclasses.dataclass
class CheckpointConfig:
    """Orbax checkpoints of the trainer state (legorl_jax/train/checkpoint.py)."""

    directory: str | None = None
    """Root directory of the run's checkpoints, one sub-directory per step (null: `checkpoints/` in the
    run's folder)."""
    every: int = 1
    """Save every N optimiser steps; in the RL loop, every N loop steps (0: never). The RL loop also saves its
    last step and, on SIGTERM / SIGINT, the last step it finished (train/checkpoint.py)."""
    max_share: float = 0.1
    """The time budget of saving: a due save is put off while the last save's blocking seconds exceed this
    share of the seconds since it ended (a big model saves less often, never more than ~this share of the
    run's time). The run's last step and a signal's save are never put off."""
    cheap_s: float = 1.0
    """A save that blocked for less than this many seconds never puts the next one off (small models save
    every step whatever the share)."""
    keep: int = 3
    """Keep the last K checkpoints."""
    async_save: bool = True
    """Write in a background thread; training continues while the bytes go to disk."""
    ignore_on_resume: list[str] = dataclasses.field(default_factory=_default_resume_ignores)
    """Config keys (dotted, `prefix.*` globs) that may differ between the checkpoint and the resumed run."""

    def __post_init__(self) -> None:
        if not is_int(self.every) or self.every < 0:
            raise ValueError(f"train.checkpoint.every must be an int >= 0, got {self.every!r}")
        positive_int("train.checkpoint.keep", self.keep)
        if (
            isinstance(self.max_share, bool)
            or not isinstance(self.max_share, (int, float))
            or not 0 < self.max_share <= 1
        ):
            raise ValueError(f"train.checkpoint.max_share must be a number in (0, 1], got {self.max_share!r}")
        if isinstance(self.cheap_s, bool) or not isinstance(self.cheap_s, (int, float)) or self.cheap_s < 0:
            raise ValueError(
                f"train.checkpoint.cheap_s must be a number of seconds >= 0, got {self.cheap_s!r}"
            )
        if self.directory is not None and (not isinstance(self.directory, str) or not self.directory):
            raise ValueError(f"train.checkpoint.directory must be a path or null, got {self.directory!r}")


TRAIN_SCHEDULES = ("constant", "warmup_cosine")
REMAT_POLICIES = ("none", "full", "minimal", "save_dot_except_mlp")


@dataclasses.dataclass
class TrainConfig:
    """Optimiser, schedule, batch shape, micro-batching and checkpointing of the trainer."""

    learning_rate: float = 1e-6
    """Peak learning rate of AdamW."""
    schedule: str = "constant"
    """Learning-rate schedule: constant or warmup_cosine (decays to final_lr_ratio at total_steps)."""
    warmup_steps: int = 0
    """Linear warm-up steps (both schedules)."""
    total_steps: int = 1000
    """Optimiser steps of the run; the cosine reaches its floor here (a warning is logged at lr 0)."""
    final_lr_ratio: float = 0.0
    """Cosine floor as a fraction of the peak."""
    b1: float = 0.9
    """AdamW β1."""
    b2: float = 0.999
    """AdamW β2."""
    eps: float = 1e-8
    """AdamW ε."""
    weight_decay: float = 0.01
    """AdamW decoupled weight decay."""
    max_grad_norm: float = 1.0
    """Clip gradients by this global norm (0: no clipping)."""
    max_tokens: int = 32768
    """Tokens per packed row (the training window); a trial with a longer sequence is refused whole, never
    cut, and counted every step (`batch/overlong`)."""
    micro_batch_rows: int = 1
    """Rows per micro-batch (gradient accumulation); a multiple of the mesh's batch shards."""
    mini_batches: int = 1
    """Optimiser updates per batch per epoch; with more than one update π_old is recomputed first."""
    epochs: int = 1
    """Passes over each batch."""
    routing_replay: bool = True
    """Replay the recorded routing (R3); off routes every token natively."""
    routing_agreement_every: int = 1
    """Every N steps run one extra forward without replay to measure routing agreement (0: never)."""
    logprob_impl: str = "auto"
    """Implementation of legorl_jax.kernels.logprobs.token_logprobs: auto, pallas, xla or reference."""
    remat: str = "full"
    """What each decoder layer keeps for the backward (model/decoder.py, REMAT_POLICIES): none (everything),
    full (its input only; all else recomputed), minimal (also every matmul output without batch dims) or
    save_dot_except_mlp (also the attention projections; the MLP / experts recomputed)."""
    checkpoint: CheckpointConfig = dataclasses.field(default_factory=CheckpointConfig)
    """Checkpointing."""

    def __post_init__(self) -> None:
        if self.schedule not in TRAIN_SCHEDULES:
            raise ValueError(f"train.schedule must be one of {TRAIN_SCHEDULES}, got {self.schedule!r}")
        if self.remat not in REMAT_POLICIES:
            raise ValueError(f"train.remat must be one of {REMAT_POLICIES}, got {self.remat!r}")
        if self.logprob_impl not in ("auto", "pallas", "xla", "reference"):
            raise ValueError(
                f"train.logprob_impl must be auto, pallas, xla or reference, got {self.logprob_impl!r}"
            )
        if not self.learning_rate >= 0.0:
            raise ValueError(f"train.learning_rate must be >= 0, got {self.learning_rate!r}")
        for name in ("max_grad_norm", "weight_decay", "warmup_steps", "routing_agreement_every"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"train.{name} must be >= 0, got {getattr(self, name)!r}")
        if not 0.0 <= self.final_lr_ratio <= 1.0:
            raise ValueError(f"train.final_lr_ratio must lie in [0, 1], got {self.final_lr_ratio!r}")
        for name in ("b1", "b2"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"train.{name} must lie in [0, 1), got {getattr(self, name)!r}")
        if not self.eps > 0.0:
            raise ValueError(f"train.eps must be > 0, got {self.eps!r}")
        for name in ("total_steps", "max_tokens", "micro_batch_rows", "mini_batches", "epochs"):
            positive_int(f"train.{name}", getattr(self, name))
        if self.max_tokens < 2:
            raise ValueError(f"train.max_tokens must be >= 2, got {self.max_tokens!r}")
        if self.schedule == "warmup_cosine" and self.warmup_steps >= self.total_steps:
            raise ValueError(
                f"train.warmup_steps={self.warmup_steps} must be < train.total_steps={self.total_steps} "
                "for warmup_cosine"
            )

    @property
    def updates_per_batch(self) -> int:
        """Optimiser updates taken on one batch (mini-batches × epochs)."""
        return self.mini_batches * self.epochs


# ----------------------------------------------------------------------------------------------------
# tasks/ and verifier/ (tasks and verifier issue)
# ----------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class TasksConfig:
    """Which tasks a run trains and evaluates on (`legorl_jax.tasks.registry.load_suite`)."""

    suite: str = "builtin"
    """'builtin', a SWE-bench/SWE-Gym .jsonl/.json file, or a Harbor task directory (or a directory
    of them)."""
    split: str | None = "train"
    """Tasks of this split are trained on; null takes every task of the suite."""
    eval_split: str | None = "validation"
    """Tasks of this split are evaluated on; null evaluates nothing."""
    image_template: str = "swebench/sweb.eval.x86_64.{instance_id}:latest"
    """Image name of a SWE-bench row that names none; {instance_id} is swebench's spelling
    (`__` -> `_1776_`), {swegym_instance_id} SWE-Gym's (`__` -> `_s_`)."""
    test_cmd: str | None = None
    """Test command (followed by the test files) of SWE-bench-style rows whose repository no spec knows
    (SWE-Gym's: 'pytest -rA'); null: such a row is an error."""
    log_parser: str | None = None
    """Log parser of SWE-bench-style rows whose repository no spec knows (SWE-Gym's: parse_log_pytest)."""
    build_images: bool = True
    """Build missing built-in / Harbor task images before the first trial (prebuilt images are never
    pulled)."""
    ids: list[str] | None = None
    """Only these instance ids of the split (in this order); null: every task of the split."""

    def __post_init__(self) -> None:
        if not isinstance(self.suite, str) or not self.suite.strip():
            raise ValueError(f"tasks.suite must be 'builtin' or a path, got {self.suite!r}")
        for name in ("split", "eval_split"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ValueError(f"tasks.{name} must be a split name or null, got {value!r}")
        if self.ids is not None and (
            not isinstance(self.ids, (list, tuple))
            or not self.ids
            or not all(isinstance(i, str) and i for i in self.ids)
        ):
            raise ValueError(f"tasks.ids must be a non-empty list of instance ids or null, got {self.ids!r}")
        if "{instance_id}" not in self.image_template and "{swegym_instance_id}" not in self.image_template:
            raise ValueError(
                "tasks.image_template must contain '{instance_id}' or '{swegym_instance_id}', got "
                f"{self.image_template!r}"
            )
        for name in ("test_cmd", "log_parser"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ValueError(f"tasks.{name} must be a non-empty string or null, got {value!r}")


@dataclasses.dataclass
class VerifierConfig:
    """Resources of the grading sandboxes (`legorl_jax.tasks.verifier.grade`)."""

    backend: str = "auto"
    """Sandbox backend of the grading sandboxes: auto (Docker when a daemon answers, else bubblewrap),
    docker or bwrap (`legorl_jax.sandbox.make_sandbox`)."""
    cpus: float = 1.0
    """CPU quota of one grading sandbox, in cores."""
    memory_mb: int = 2048
    """Memory limit of one grading sandbox."""
    pids: int = 256
    """Process limit of one grading sandbox."""
    disk_mb: int = 2048
    """Writable space of one grading sandbox."""
    timeout_multiplier: float = 1.0
    """Scales every task's `verify_s` (slow hosts, heavy SWE-bench suites)."""
    concurrency: int = 8
    """Grading sandboxes alive at once."""

    def __post_init__(self) -> None:
        if self.backend not in SANDBOX_BACKENDS:
            raise ValueError(f"verifier.backend must be one of {SANDBOX_BACKENDS}, got {self.backend!r}")
        for name in ("cpus", "memory_mb", "pids", "disk_mb", "timeout_multiplier"):
            positive_number(f"verifier.{name}", getattr(self, name))
        positive_int("verifier.concurrency", self.concurrency)


# ----------------------------------------------------------------------------------------------------
# sandbox/ (sandbox issue)
# ----------------------------------------------------------------------------------------------------

SANDBOX_BACKENDS = ("auto", "docker", "bwrap")
SANDBOX_NETWORKS = ("none", "proxy_only")


@dataclasses.dataclass
class SandboxConfig:
    """Backend and limits of the agents' sandboxes (`legorl_jax.sandbox.spec_from_config`)."""

    backend: str = "auto"
    """'docker', 'bwrap' (bubblewrap), or 'auto': Docker when a daemon answers, else bubblewrap."""
    network: str = "none"
    """'none', or 'proxy_only' (only the capture proxy is reachable) for harnesses that run inside."""
    cpus: float = 1.0
    """CPU quota of one sandbox, in cores."""
    memory_mb: int = 2048
    """Memory limit of one sandbox (swap included); tmpfs workspaces count against it too."""
    pids: int = 256
    """Process limit of one sandbox."""
    disk_mb: int = 2048
    """Size of each writable tmpfs (workdir, home, /tmp) and the cap on any single file."""
    read_only_root: bool = True
    """Only the workdir, home and /tmp are writable (False: the image's root is writable, unbounded)."""
    output_limit_bytes: int = 1 << 20
    """Cap on each of stdout / stderr of one exec; longer output is cut and flagged `truncated`."""

    def __post_init__(self) -> None:
        if self.backend not in SANDBOX_BACKENDS:
            raise ValueError(f"sandbox.backend must be one of {SANDBOX_BACKENDS}, got {self.backend!r}")
        if self.network not in SANDBOX_NETWORKS:
            raise ValueError(f"sandbox.network must be one of {SANDBOX_NETWORKS}, got {self.network!r}")
        positive_number("sandbox.cpus", self.cpus)
        for name in ("memory_mb", "pids", "disk_mb", "output_limit_bytes"):
            positive_int(f"sandbox.{name}", getattr(self, name))
        if not isinstance(self.read_only_root, bool):
            raise ValueError(f"sandbox.read_only_root must be a bool, got {self.read_only_root!r}")


# ----------------------------------------------------------------------------------------------------
# engine/ (rollout engines issue)
# ----------------------------------------------------------------------------------------------------

ENGINE_BACKENDS = ("jax", "sglang")
UPDATE_POLICIES = ("drain", "abort_resume", "in_place")


@dataclasses.dataclass
class SGLangConfig:
    """How `legorl_jax.engine.sglang_launcher` starts an SGLang server (ignored when engine.url is set)."""

    python: str | None = "python"
    """Interpreter that has sglang installed (`pip install 'legorl_jax[sglang]'`, CUDA hosts); null: the one
    running this process (conf/engine/fleet.yaml, whose servers are ours)."""
    module: str = "sglang.launch_server"
    """Module run with `python -m`; its top-level package must be importable by `python`."""
    host: str = "127.0.0.1"
    """Address the server binds."""
    port: int = 30000
    """Port the server listens on."""
    tp: int = 1
    """Tensor-parallel degree (`--tp`)."""
    gpus: list[int] | None = None
    """GPUs the launched server may use (its CUDA_VISIBLE_DEVICES); null: what this process sees. Async
    training on one host keeps them apart from the trainer's (`mesh.devices`)."""
    extra_args: list[str] = dataclasses.field(default_factory=list)
    """Further launch_server flags, verbatim (e.g. ["--mem-fraction-static", "0.8"])."""
    startup_timeout_s: float = 900.0
    """How long to wait for /health after starting (model download and CUDA graph capture included)."""
    stop_grace_s: float = 30.0
    """Seconds between SIGTERM and SIGKILL when stopping the server's process group."""
    log_file: str | None = None
    """Where the server's stdout/stderr go (None: a temporary file, reported on failure)."""

    def __post_init__(self) -> None:
        for name in ("python", "module", "host"):
            if name == "python" and self.python is None:
                continue
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ValueError(
                    f"engine.sglang.{name} must be a non-empty string, got {getattr(self, name)!r}"
                )
        if not is_int(self.port) or not 0 < self.port < 65536:
            raise ValueError(f"engine.sglang.port must be an int in [1, 65535], got {self.port!r}")
        positive_int("engine.sglang.tp", self.tp)
        if self.gpus is not None and (
            not isinstance(self.gpus, list | tuple)
            or not self.gpus
            or not all(is_int(g) and g >= 0 for g in self.gpus)
        ):
            raise ValueError(
                f"engine.sglang.gpus must be a list of GPU indices >= 0 or null, got {self.gpus!r}"
            )
        if not all(isinstance(a, str) for a in self.extra_args):
            raise ValueError(f"engine.sglang.extra_args must be a list of strings, got {self.extra_args!r}")
        for name in ("startup_timeout_s", "stop_grace_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"engine.sglang.{name} must be > 0, got {getattr(self, name)!r}")


ROUTER_POLICIES = ("manual", "cache_aware", "round_robin", "random", "power_of_two")


@dataclasses.dataclass
class RouterConfig:
    """The sglang-router in front of an engine fleet (`python -m sglang_router.launch_router`)."""

    python: str | None = None
    """Interpreter that has sglang-router installed (`pip install 'legorl_jax[fleet]'`); null: the one
    running this process."""
    host: str = "127.0.0.1"
    """Address the router binds (the proxy reaches the fleet there)."""
    port: int = 30100
    """Port the router listens on."""
    prometheus_port: int = 30101
    """Port of the router's Prometheus exporter (two routers on one host need different ones)."""
    policy: str = "manual"
    """manual: sticky by routing key (our session id, header x-smg-routing-key); cache_aware: by prompt
    prefix; round_robin, random, power_of_two: no affinity."""
    assignment_mode: str = "min_group"
    """manual: where a new session goes: min_group (the engine with the fewest sessions that have a request
    in flight), min_load (the fewest requests in flight) or random; ties go at random."""
    health_check_interval_s: int = 2
    """Seconds between the router's health checks of each engine."""
    health_failure_threshold: int = 1
    """Failed checks after which the router takes an engine out."""
    extra_args: list[str] = dataclasses.field(default_factory=list)
    """Further launch_router flags, verbatim."""
    startup_timeout_s: float = 120.0
    """How long to wait for the router's /health and for every engine to be in its worker list."""
    log_file: str | None = None
    """Where the router's output goes (None: a temporary file, reported on failure)."""

    def __post_init__(self) -> None:
        if self.python is not None and (not isinstance(self.python, str) or not self.python):
            raise ValueError(f"engine.router.python must be a non-empty string or null, got {self.python!r}")
        if not isinstance(self.host, str) or not self.host:
            raise ValueError(f"engine.router.host must be a non-empty string, got {self.host!r}")
        for name in ("port", "prometheus_port"):
            if not is_int(getattr(self, name)) or not 0 < getattr(self, name) < 65536:
                raise ValueError(
                    f"engine.router.{name} must be an int in [1, 65535], got {getattr(self, name)!r}"
                )
        if self.policy not in ROUTER_POLICIES:
            raise ValueError(f"engine.router.policy must be one of {ROUTER_POLICIES}, got {self.policy!r}")
        if self.assignment_mode not in ("min_group", "min_load", "random"):
            raise ValueError(
                "engine.router.assignment_mode must be one of min_group, min_load, random, got "
                f"{self.assignment_mode!r}"
            )
        positive_int("engine.router.health_check_interval_s", self.health_check_interval_s)
        positive_int("engine.router.health_failure_threshold", self.health_failure_threshold)
        if not all(isinstance(a, str) for a in self.extra_args):
            raise ValueError(f"engine.router.extra_args must be a list of strings, got {self.extra_args!r}")
        if not self.startup_timeout_s > 0:
            raise ValueError(f"engine.router.startup_timeout_s must be > 0, got {self.startup_timeout_s!r}")


@dataclasses.dataclass
class EngineConfig:
    """The rollout engine: the embedded JAX engine, or SGLang (launched here or already running at `url`)."""

    backend: str = "jax"
    """jax (in process, on the policy) or sglang (HTTP; also any server with SGLang's API, e.g. ours)."""
    max_running: int = 32
    """jax: decode slots, the requests decoded together (continuous batching)."""
    max_len: int = 4096
    """jax: context length of a request, prompt plus output (KV cache positions per slot)."""
    min_prefill_bucket: int = 64
    """jax: smallest prompt-length bucket; buckets double up to the chunk size (one prefill program each)."""
    chunked_prefill_size: int | None = 4096
    """jax: longest prompt chunk prefilled at once (bounds attention memory); None: max_len in one piece."""
    prefix_cache_slots: int = 0
    """jax: spare KV slots keeping finished requests' prefixes resident for the next turn (0: no cache)."""
    prefix_cache_tokens: int | None = None
    """jax: most tokens the prefix cache keeps in all (None: only the slots limit it)."""
    dtype: str | None = None
    """jax: weight and KV dtype of the engine (None: the given policy's, or float32 when loading a
    directory)."""
    device: int | None = None
    """jax: index (into `jax.devices()`) of the device the engine runs on; null: the first. Async training
    on one host puts it outside the trainer's `mesh.devices`."""
    mem_fraction: float | None = 0.5
    """jax: KV cache budget, a fraction of the device memory free at start (engine/kv_budget.py: slots are
    given up to fit, and a cache that cannot hold one slot of max_len is refused); null: no budget."""
    kv_gib: float | None = None
    """jax: KV cache budget in GiB, instead of mem_fraction."""
    weight_version: str = "default"
    """Version reported until the first update (as SGLang: "default"); a launched server gets it too."""
    url: str | None = None
    """sglang: base URL of a running server; None launches one with `sglang`."""
    request_timeout_s: float = 1800.0
    """sglang: seconds one /generate may take before it is aborted."""
    connect_retries: int = 3
    """sglang: retries of a request that could not connect (never of one that was sent)."""
    retry_backoff_s: float = 0.5
    """sglang: first retry delay, doubled each time."""
    sglang: SGLangConfig = dataclasses.field(default_factory=SGLangConfig)
    """sglang: how the server is launched."""
    servers: list[str] = dataclasses.field(default_factory=list)
    """sglang fleet: base URLs of running engine servers (ours or SGLang) put behind the router."""
    launch: int = 0
    """sglang fleet: start this many servers with `sglang` on ports sglang.port, sglang.port + 1, ..."""
    router_url: str | None = None
    """sglang fleet: a router that already runs (its worker list is the fleet); None starts one with
    `router` in front of `servers` or `launch`."""
    router: RouterConfig = dataclasses.field(default_factory=RouterConfig)
    """sglang fleet: how the router is started."""
    update_policy: str = "in_place"
    """What a weight update does to requests decoding when it lands (async training; a sync loop publishes
    with none in flight): `drain` (they finish on the old weights, new ones wait), `abort_resume` (they are
    aborted and re-issued by the proxy with their tokens so far appended to the prompt), `in_place` (they
    continue on the new weights with their KV cache kept)."""
    max_resumes: int = 8
    """abort_resume: how many times one request may be aborted by weight updates and resumed."""

    @property
    def fleet(self) -> bool:
        """True when the engine is a fleet of servers behind sglang-router."""
        return bool(self.servers) or self.launch > 0 or self.router_url is not None

    def __post_init__(self) -> None:
        if self.backend not in ENGINE_BACKENDS:
            raise ValueError(f"engine.backend must be one of {ENGINE_BACKENDS}, got {self.backend!r}")
        for name in ("chunked_prefill_size", "prefix_cache_tokens"):  # null allowed
            if getattr(self, name) is not None:
                positive_int(f"engine.{name}", getattr(self, name))
        if not is_int(self.prefix_cache_slots) or self.prefix_cache_slots < 0:
            raise ValueError(
                f"engine.prefix_cache_slots must be an int >= 0, got {self.prefix_cache_slots!r}"
            )
        for name in ("max_running", "max_len", "min_prefill_bucket"):
            positive_int(f"engine.{name}", getattr(self, name))
        if self.max_len < 2:
            raise ValueError(f"engine.max_len must be >= 2, got {self.max_len!r}")
        if self.dtype is not None and self.dtype not in _DTYPES:
            raise ValueError(f"engine.dtype must be one of {_DTYPES} or null, got {self.dtype!r}")
        if not isinstance(self.weight_version, str) or not self.weight_version:
            raise ValueError(f"engine.weight_version must be a non-empty string, got {self.weight_version!r}")
        if self.device is not None and (not is_int(self.device) or self.device < 0):
            raise ValueError(f"engine.device must be a device index >= 0 or null, got {self.device!r}")
        if self.mem_fraction is not None and (
            isinstance(self.mem_fraction, bool)
            or not isinstance(self.mem_fraction, int | float)
            or not 0 < self.mem_fraction <= 1
        ):
            raise ValueError(f"engine.mem_fraction must lie in (0, 1] or be null, got {self.mem_fraction!r}")
        if self.kv_gib is not None:
            positive_number("engine.kv_gib", self.kv_gib)
        if self.update_policy not in UPDATE_POLICIES:
            raise ValueError(
                f"engine.update_policy must be one of {UPDATE_POLICIES}, got {self.update_policy!r}"
            )
        if not is_int(self.max_resumes) or self.max_resumes < 0:
            raise ValueError(f"engine.max_resumes must be an int >= 0, got {self.max_resumes!r}")
        if self.url is not None and not str(self.url).startswith(("http://", "https://")):
            raise ValueError(f"engine.url must be an http(s) URL or null, got {self.url!r}")
        if not self.request_timeout_s > 0:
            raise ValueError(f"engine.request_timeout_s must be > 0, got {self.request_timeout_s!r}")
        if not is_int(self.connect_retries) or self.connect_retries < 0:
            raise ValueError(f"engine.connect_retries must be an int >= 0, got {self.connect_retries!r}")
        if not self.retry_backoff_s >= 0:
            raise ValueError(f"engine.retry_backoff_s must be >= 0, got {self.retry_backoff_s!r}")
        if not is_int(self.launch) or self.launch < 0:
            raise ValueError(f"engine.launch must be an int >= 0 (servers to start), got {self.launch!r}")
        if not isinstance(self.servers, list) or not all(
            isinstance(u, str) and u.startswith(("http://", "https://")) for u in self.servers
        ):
            raise ValueError(f"engine.servers must be a list of http(s) URLs, got {self.servers!r}")
        if self.router_url is not None and not str(self.router_url).startswith(("http://", "https://")):
            raise ValueError(f"engine.router_url must be an http(s) URL or null, got {self.router_url!r}")
        given = [n for n, v in (("servers", self.servers), ("launch", self.launch), ("router_url",
                 self.router_url), ("url", self.url)) if v]  # fmt: skip
        if len(given) > 1:
            raise ValueError(f"engine: set only one of servers, launch, router_url and url, got {given}")
        if self.fleet and self.backend != "sglang":
            raise ValueError(f"engine.{given[0]} makes a fleet, which needs engine.backend=sglang, got "
                             f"{self.backend!r}")  # fmt: skip


# ----------------------------------------------------------------------------------------------------
# proxy/ (capture proxy issue)
# ----------------------------------------------------------------------------------------------------

PROXY_MODES = ("train", "eval")
TOOL_PARSERS = ("qwen3", "hermes", "qwen3_coder")
MAX_JSON_DEPTH = 200  # orjson encodes at most 254 levels; the archive and retry key wrap a body in a few more
SHARED_TOKEN_MODES = ("mask", "recompute")


@dataclasses.dataclass
class ProxyConfig:
    """The capture proxy (legorl_jax.proxy): sampling it enforces, how it parses and records, its limits."""

    mode: str = "train"
    """train: the proxy enforces `temperature`, top_p 1 and top_k off; eval: the harness's values pass
    through."""
    temperature: float = 1.0
    """Rollout temperature in train mode (the trainer scores with the same value); eval's default."""
    max_response_tokens: int = 4096
    """Most tokens one reply may sample (the harness's max_tokens is capped by it and by the context left)."""
    context_length: int | None = None
    """Prompt + reply limit; None: the engine's (JaxEngine max_len) or the model's max_position_embeddings."""
    tool_parser: str = "qwen3"
    """Tool-call format of the model family: qwen3 (= hermes, JSON) or qwen3_coder (XML)."""
    chat_template_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Extra chat template variables (e.g. {enable_thinking: false}); the trainer renders nothing itself."""
    shared_tokens: str = "mask"
    """A new branch's tokens that an earlier branch sampled: mask (context) or recompute (engine
    log-probs)."""
    train_side: bool = False
    """Train on side conversations (sub-agents, title generators) too."""
    side_system_prefixes: list[str] = dataclasses.field(
        default_factory=lambda: ["You are a title generator. You output ONLY a thread title."]
    )
    """System prompts starting with one of these are side conversations even on a session's first call."""
    main_prefix_match: int = 256
    """A system prompt sharing this many leading characters with the main thread's stays on the main
    thread."""
    max_consecutive_no_tool: int = 3
    """Replies without a tool call in a row (when tools are offered) after which the session ends (0: off)."""
    max_body_bytes: int = 32 * 2**20
    """Largest request body accepted (larger: 413)."""
    max_json_depth: int = 64
    """Deepest nesting a request body may have anywhere, tool schemas included (deeper: 400 naming the
    field); at most 200, below the JSON encoder's own limit of 254 that the archive and retry key meet."""
    archive_dir: str = "runs/proxy"
    """Where sessions opened without a trial_dir are archived (<archive_dir>/<session_id>/)."""
    model_name: str = "legorl-policy"
    """The model id /v1/models lists (any name a harness sends is accepted)."""

    def __post_init__(self) -> None:
        if self.mode not in PROXY_MODES:
            raise ValueError(f"proxy.mode must be one of {PROXY_MODES}, got {self.mode!r}")
        if self.tool_parser not in TOOL_PARSERS:
            raise ValueError(f"proxy.tool_parser must be one of {TOOL_PARSERS}, got {self.tool_parser!r}")
        if self.shared_tokens not in SHARED_TOKEN_MODES:
            raise ValueError(
                f"proxy.shared_tokens must be one of {SHARED_TOKEN_MODES}, got {self.shared_tokens!r}"
            )
        positive_number("proxy.temperature", self.temperature)
        for name in ("max_response_tokens", "main_prefix_match", "max_body_bytes"):
            positive_int(f"proxy.{name}", getattr(self, name))
        depth = self.max_json_depth
        if not is_int(depth) or not 2 <= depth <= MAX_JSON_DEPTH:
            raise ValueError(f"proxy.max_json_depth must be an int in [2, {MAX_JSON_DEPTH}], got {depth!r}")
        ctx = self.context_length
        if ctx is not None and (not is_int(ctx) or ctx < 2):
            raise ValueError(f"proxy.context_length must be an int >= 2 or null, got {ctx!r}")
        limit = self.max_consecutive_no_tool
        if not is_int(limit) or limit < 0:
            raise ValueError(f"proxy.max_consecutive_no_tool must be an int >= 0, got {limit!r}")
        if not all(isinstance(p, str) and p for p in self.side_system_prefixes):
            raise ValueError(
                f"proxy.side_system_prefixes must be non-empty strings, got {self.side_system_prefixes!r}"
            )
        if not isinstance(self.chat_template_kwargs, dict):
            raise ValueError(
                f"proxy.chat_template_kwargs must be a mapping, got {self.chat_template_kwargs!r}"
            )
        for name in ("archive_dir", "model_name"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ValueError(f"proxy.{name} must be a non-empty string, got {getattr(self, name)!r}")


# ----------------------------------------------------------------------------------------------------
# harness/ and rollout/ (harness and rollout issue)
# ----------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class HarnessConfig:
    """Which coding agent runs the trials, and its limits (conf/harness/; `+harness=NAME` selects one)."""

    name: str = "builtin"
    """A name registered in `legorl_jax.harness.names.HARNESSES`: builtin | mini_swe_agent | swe_agent |
    claude_code | opencode | terminus_2 | openhands | codex."""
    step_limit: int = 30
    """Most model calls (agent steps) per trial."""
    model: str = "legorl-policy"
    """The model name the harness sends to the proxy."""
    options: dict[str, Any] = dataclasses.field(default_factory=dict)
    """The adapter's own settings (e.g. builtin: {command_timeout_s: 60})."""

    def __post_init__(self) -> None:
        # The harness registry is the one list of names, a leaf module (harness/names.py).
        from legorl_jax.harness.names import HARNESSES

        if self.name not in HARNESSES:
            raise ValueError(f"harness.name must be one of {tuple(HARNESSES)}, got {self.name!r}")
        positive_int("harness.step_limit", self.step_limit)
        if not isinstance(self.model, str) or not self.model:
            raise ValueError(f"harness.model must be a non-empty string, got {self.model!r}")
        if not isinstance(self.options, dict):
            raise ValueError(f"harness.options must be a mapping, got {self.options!r}")


ROLLOUT_EXECUTORS = ("local", "ray")


@dataclasses.dataclass
class RayConfig:
    """The Ray cluster trials run on with `rollout.executor: ray` (rollout/ray_executor.py)."""

    address: str = ""
    """An existing cluster (`ray://host:10001`, `host:6379` or `auto`); empty: start a local one."""
    node_cpus: int = 1
    """CPUs the local node declares to Ray when one is started (trials ask for none: they ask for slots)."""
    proxy_host: str = "127.0.0.1"
    """The address the capture proxies listen on with `executor: ray`: one every node reaches (this
    machine's cluster address when the nodes are other machines; loopback for nodes on this machine)."""
    connect_timeout_s: float = 10.0
    """How long `address` may take to answer before the run stops with an error naming it."""

    def __post_init__(self) -> None:
        if not isinstance(self.address, str):
            raise ValueError(f"rollout.ray.address must be a string, got {self.address!r}")
        positive_int("rollout.ray.node_cpus", self.node_cpus)
        if not isinstance(self.proxy_host, str) or not self.proxy_host:
            raise ValueError(
                f"rollout.ray.proxy_host must be a host name or address, got {self.proxy_host!r}"
            )
        positive_number("rollout.ray.connect_timeout_s", self.connect_timeout_s, unit="seconds")


@dataclasses.dataclass
class RolloutConfig:
    """How trials are run: concurrency, limits, retries, where they are archived."""

    group_size: int = 4
    """Trials per task in one step (the GRPO group)."""
    concurrency: int = 4
    """Trials running at once."""
    trial_timeout_s: float = 900.0
    """Wall-clock limit of one trial attempt (sandbox, harness and grading): past it the trial is
    `timeout`."""
    retries: int = 1
    """Further attempts of a trial whose attempt failed for infrastructure reasons (fresh sandbox and
    session)."""
    retry_wait_s: float = 60.0
    """Before retrying an `engine_failed` attempt, wait up to this long for the engine side to settle (every
    engine the router routes to answers its health check: a dead one taken out, or back); then retry."""
    retry_delay_s: float = 1.0
    """Pause before any retry, so a failure that is about to be seen (a dead node's slots) is seen first."""
    runs_dir: str = "runs"
    """Archive root: trials go to <runs_dir>/<experiment>/trials/step_<N>/<trial>/."""
    experiment: str = "default"
    """Name of the run inside runs_dir."""
    executor: str = "local"
    """Where trials run: `local` (this process) or `ray` (trial slots on the nodes of a Ray cluster)."""
    trials_per_node: int = 4
    """Trials one Ray node runs at once: the `legorl_trial` resource each local node declares, and the
    slots made per node of a cluster (`ray start --resources='{"legorl_trial": N}'`)."""
    ray: RayConfig = dataclasses.field(default_factory=RayConfig)

    def __post_init__(self) -> None:
        if self.executor not in ROLLOUT_EXECUTORS:
            raise ValueError(f"rollout.executor must be one of {ROLLOUT_EXECUTORS}, got {self.executor!r}")
        positive_int("rollout.trials_per_node", self.trials_per_node)
        for name in ("group_size", "concurrency"):
            positive_int(f"rollout.{name}", getattr(self, name))
        if not is_int(self.retries) or self.retries < 0:
            raise ValueError(f"rollout.retries must be an int >= 0, got {self.retries!r}")
        positive_number("rollout.trial_timeout_s", self.trial_timeout_s, unit="seconds")
        for name in ("retry_wait_s", "retry_delay_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"rollout.{name} must be a number of seconds >= 0, got {value!r}")
        for name in ("runs_dir", "experiment"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ValueError(f"rollout.{name} must be a non-empty string, got {getattr(self, name)!r}")


# ----------------------------------------------------------------------------------------------------
# loop/ and tracking/ (the product issue: loop.py, train.py, Aim)
# ----------------------------------------------------------------------------------------------------

PUBLISH_ROUTES = ("auto", "in_process", "disk")
LOOP_MODES = ("sync", "async")
TRACKING_BACKENDS = ("aim", "none")


@dataclasses.dataclass
class WarmStartConfig:
    """A supervised warm start before RL: the same trainer on demonstrations rendered from gold patches."""

    enabled: bool = False
    """Run it (a random-initialised tiny model cannot call tools; a real checkpoint needs none)."""
    steps: int = 100
    """Optimiser steps over the demonstrations."""
    learning_rate: float = 3e-3
    """Constant AdamW learning rate of the warm start."""
    stop_below: float | None = None
    """Stop early once the demonstration NLL per token falls below this (a partial warm start leaves RL
    something to learn: a model that already copies the demonstrations has nothing to be rewarded for);
    None: all `steps`."""
    split: str | None = "same"
    """Whose gold patches are demonstrated: `same` (the RL tasks themselves; the summary says so) or a
    split."""
    cache_dir: str = "runs/warm_start"
    """Finished warm starts are kept here as HF directories, keyed by model, tasks, steps and rate."""

    def __post_init__(self) -> None:
        if not isinstance(self.enabled, bool):
            raise ValueError(f"loop.warm_start.enabled must be true or false, got {self.enabled!r}")
        positive_int("loop.warm_start.steps", self.steps)
        positive_number("loop.warm_start.learning_rate", self.learning_rate)
        if self.stop_below is not None:
            positive_number("loop.warm_start.stop_below (or null)", self.stop_below)
        if self.split is not None and (not isinstance(self.split, str) or not self.split):
            raise ValueError(
                f"loop.warm_start.split must be 'same', a split name or null, got {self.split!r}"
            )


@dataclasses.dataclass
class LoopConfig:
    """The RL loop (legorl_jax/loop.py, synchronous; legorl_jax/async_loop.py, fully asynchronous): how many
    steps, which tasks per step, staleness, validation, publishing."""

    mode: str = "sync"
    """sync: collect a step's trials, then train, then publish. async: trials run continuously (up to
    rollout.concurrency at once) while the trainer takes each `groups_per_step` groups as they end."""
    steps: int = 100
    """Loop steps (sync: collect → update → checkpoint → publish → monitor; async: trainer updates)."""
    groups_per_step: int | None = None
    """async: GRPO groups (one task's `rollout.group_size` trials) per trainer update; null: as many as a
    sync step has (`tasks_per_step`, or every train task)."""
    max_staleness: int = 1
    """async: most weight versions a trained token may lag the trainer by. No trial starts that could not
    finish within it (admission), and a group whose oldest token is older is dropped and counted (`stale`)."""
    stall_timeout_s: float = 1800.0
    """async: the watchdog reports a loop where no trial ended and no update ran for this many seconds."""
    tasks_per_step: int | None = None
    """Tasks drawn per step (seeded by step, so a resumed run draws the same); null: every train task."""
    validate_every: int = 10
    """Validate on tasks.eval_split every N steps and after the last (0: never)."""
    validation_group_size: int = 1
    """Trials per validation task."""
    validation_tasks: int | None = None
    """Validate on the first N tasks of the split (null: all)."""
    publish: str = "auto"
    """How new weights reach the engine: in_process (embedded engine), disk (HF dir for SGLang) or auto."""
    publish_dir: str | None = None
    """Where `disk` publishing writes versioned HF directories (null: `weights/` in the run's folder)."""
    trial_texts: bool = True
    """Track every trial's conversation as an Aim Text."""
    warm_start: WarmStartConfig = dataclasses.field(default_factory=WarmStartConfig)
    """Supervised warm start before the first RL step."""

    def __post_init__(self) -> None:
        positive_int("loop.steps", self.steps)
        positive_int("loop.validation_group_size", self.validation_group_size)
        for name in ("tasks_per_step", "validation_tasks"):  # null: every task
            if getattr(self, name) is not None:
                positive_int(f"loop.{name}", getattr(self, name))
        if not is_int(self.validate_every) or self.validate_every < 0:
            raise ValueError(f"loop.validate_every must be an int >= 0, got {self.validate_every!r}")
        if self.publish not in PUBLISH_ROUTES:
            raise ValueError(f"loop.publish must be one of {PUBLISH_ROUTES}, got {self.publish!r}")
        if not isinstance(self.trial_texts, bool):
            raise ValueError(f"loop.trial_texts must be true or false, got {self.trial_texts!r}")
        if self.mode not in LOOP_MODES:
            raise ValueError(f"loop.mode must be one of {LOOP_MODES}, got {self.mode!r}")
        if self.groups_per_step is not None:
            positive_int("loop.groups_per_step", self.groups_per_step)
        if not is_int(self.max_staleness) or self.max_staleness < 0:
            raise ValueError(f"loop.max_staleness must be an int >= 0, got {self.max_staleness!r}")
        positive_number("loop.stall_timeout_s", self.stall_timeout_s, unit="seconds")


@dataclasses.dataclass
class TrackingConfig:
    """Where metrics go (legorl_jax/monitor/): an Aim repository, one run per job."""

    backend: str = "aim"
    """aim, or none (metrics only in the log)."""
    repo: str = "runs/aim"
    """The Aim repository (one per sweep: every job of `-m` writes its own run into it)."""
    experiment: str | None = None
    """Aim experiment name of the run (null: rollout.experiment)."""
    run_name: str | None = None
    """Display name of the run (null: the config overrides of the job, e.g.
    `algo=cispo train.learning_rate=1e-6`)."""

    def __post_init__(self) -> None:
        if self.backend not in TRACKING_BACKENDS:
            raise ValueError(f"tracking.backend must be one of {TRACKING_BACKENDS}, got {self.backend!r}")
        if not isinstance(self.repo, str) or not self.repo:
            raise ValueError(f"tracking.repo must be a non-empty string, got {self.repo!r}")
        if self.experiment is not None and (not isinstance(self.experiment, str) or not self.experiment):
            raise ValueError(
                f"tracking.experiment must be a non-empty string or null, got {self.experiment!r}"
            )


# ----------------------------------------------------------------------------------------------------
# Root
# ----------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Config:
    """The root config: one field per group."""

    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    """The policy checkpoint and its numerics."""
    mesh: MeshConfig = dataclasses.field(default_factory=MeshConfig)
    """Device mesh for the trainer."""
    algo: AlgoConfig = dataclasses.field(default_factory=AlgoConfig)
    """The policy-gradient algorithm (conf/algo/)."""
    train: TrainConfig = dataclasses.field(default_factory=TrainConfig)
    """Optimiser, batch shape and checkpointing of the trainer (conf/train/)."""
    tasks: TasksConfig = dataclasses.field(default_factory=TasksConfig)
    """Which task suite and splits (conf/tasks/)."""
    verifier: VerifierConfig = dataclasses.field(default_factory=VerifierConfig)
    """Grading sandbox resources (conf/verifier/)."""
    sandbox: SandboxConfig = dataclasses.field(default_factory=SandboxConfig)
    """Agent sandbox backend and limits (conf/sandbox/)."""
    engine: EngineConfig = dataclasses.field(default_factory=EngineConfig)
    """The rollout engine (conf/engine/)."""
    proxy: ProxyConfig = dataclasses.field(default_factory=ProxyConfig)
    """The capture proxy between harnesses and the engine (conf/proxy/)."""
    harness: HarnessConfig = dataclasses.field(default_factory=HarnessConfig)
    """The coding agent (conf/harness/, selected with +harness=NAME; the built-in agent otherwise)."""
    rollout: RolloutConfig = dataclasses.field(default_factory=RolloutConfig)
    """Trial concurrency, limits, retries and archive (conf/rollout/)."""
    loop: LoopConfig = dataclasses.field(default_factory=LoopConfig)
    """The RL loop: steps, tasks per step, validation, publishing, warm start (conf/loop/)."""
    tracking: TrackingConfig = dataclasses.field(default_factory=TrackingConfig)
    """Experiment tracking (conf/tracking/)."""
    seed: int = 0
    """Seed of every random stream in the run."""
    resume: bool = False
    """Continue the run in rollout.runs_dir/rollout.experiment from its last checkpoint."""
    overwrite: bool = False
    """Start afresh where a run already is: the old run's folder is moved aside (`<name>.replaced-<time>`),
    never deleted. Without it (or resume) such a start is refused."""

    def __post_init__(self) -> None:
        # Across groups. The async loop trains in a worker thread while process 0 serves trials; the
        # processes that follow process 0's trainer calls (train/commands.py) are built and tested for the
        # sync loop only, so the two are not combined.
        distributed = self.mesh.distributed
        if self.loop.mode == "async" and distributed.enabled and distributed.num_processes != 1:
            raise ValueError(
                "loop.mode='async' runs on one process: it cannot be combined with "
                f"mesh.distributed.enabled=true (num_processes={distributed.num_processes!r}); use "
                "loop.mode=sync on several processes, or mesh.distributed.enabled=false"
            )
        # A conversation the embedded engine may grow to engine.max_len tokens; the trainer refuses a trial
        # with a sequence longer than its row (train/batch.py), so the two should follow one setting.
        if self.engine.backend == "jax" and self.engine.max_len > self.train.max_tokens:
            log.warning(
                "engine.max_len=%d exceeds train.max_tokens=%d: trials longer than a row are refused by "
                "the trainer (batch/overlong); set both to the same length",
                self.engine.max_len,
                self.train.max_tokens,
            )


def register_configs() -> None:
    """Registers the schemas with Hydra's ConfigStore (idempotent). Call from entry points only."""
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    cs.store(name="config_schema", node=Config)
    cs.store(group="model", name="schema", node=ModelConfig)
    cs.store(group="mesh", name="schema", node=MeshConfig)
    cs.store(group="algo", name="schema", node=AlgoConfig)
    cs.store(group="train", name="schema", node=TrainConfig)
    cs.store(group="tasks", name="schema", node=TasksConfig)
    cs.store(group="verifier", name="schema", node=VerifierConfig)
    cs.store(group="sandbox", name="schema", node=SandboxConfig)
    cs.store(group="engine", name="schema", node=EngineConfig)
    cs.store(group="proxy", name="schema", node=ProxyConfig)
    cs.store(group="harness", name="schema", node=HarnessConfig)
    cs.store(group="rollout", name="schema", node=RolloutConfig)
    cs.store(group="loop", name="schema", node=LoopConfig)
    cs.store(group="tracking", name="schema", node=TrackingConfig)


def flatten_config(tree: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted keys of a nested dict/list config (`{"a": {"b": 1}}` -> `{"a.b": 1}`); lists stay values."""
    if not isinstance(tree, dict):
        return {prefix: tree}
    out: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict) and value:
            out.update(flatten_config(value, name))
        else:
            out[name] = value
    return out
