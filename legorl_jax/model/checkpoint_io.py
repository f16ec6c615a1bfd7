"""Reading and writing HF checkpoint directories (config.json + safetensors, single or sharded).

`load_hf(path, dtype="float32", *, compute_dtype=None, scan_layers=True, remat=False, mesh=None, rules=None)
-> Policy` reads `config.json` (either dialect, architecture.py) and `model.safetensors` or, when present,
`model.safetensors.index.json` and the shards it names; with `mesh` each parameter is created directly with
its sharding (a 30B model never lands whole on one device). Every tensor is checked against the layout
`hf_layout.hf_shapes(config)` before anything is built: a missing, unexpected or mis-shaped tensor is a
ValueError naming it (with expected and received shape), and so is a tensor stored in a dtype other than F32,
BF16 or F16 (those are converted to `dtype`). With an index, its `weight_map` must map names to file names,
and a shard holding a tensor the index does not assign to it is refused (an unlisted tensor would otherwise be
ignored); a file that is not safetensors is a ValueError naming the file.

`save_hf(policy, path, dtype="bfloat16", *, source_dir=None, max_shard_bytes=5e9)` writes the Hub layout:
`config.json` (Hub dialect, `torch_dtype` = dtype) and `model.safetensors`, or, above `max_shard_bytes`,
`model-0000i-of-0000n.safetensors` with `model.safetensors.index.json` (`metadata.total_size`,
`weight_map`). Files are written under temporary names and renamed, earlier weight files in `path` are
removed (no stale shard can mix in), every other file there is kept, and with `source_dir` every
non-weight file of that directory (tokenizer, generation config, ...) is copied in. Header metadata
`{"format": "pt"}` is what transformers expects of a PyTorch-layout checkpoint.
"""

from __future__ import annotations

import functools
import json
import os
import pathlib
import shutil
from collections.abc import Callable
from typing import Any

import numpy as np
from jax.sharding import Mesh
from safetensors import SafetensorError, safe_open
from safetensors.numpy import save_file

from legorl_jax.model.architecture import ArchConfig
from legorl_jax.model.hf_layout import NUMPY_DTYPES, hf_shapes, policy_from_tensors, policy_tensors
from legorl_jax.model.policy import Policy
from legorl_jax.model.sharding import Rules
from legorl_jax.validate import positive_int

SINGLE = "model.safetensors"
INDEX = "model.safetensors.index.json"
CONFIG = "config.json"
DEFAULT_MAX_SHARD_BYTES = 5 * 10**9


def _is_weight_file(name: str) -> bool:
    return name.endswith(".safetensors") or name == INDEX


# Stored dtypes a policy can be built from (safetensors' names); anything else is refused, not cast.
STORED_DTYPES = ("F32", "BF16", "F16")


def _open(file: pathlib.Path) -> Any:
    try:
        return safe_open(str(file), framework="numpy")
    except (SafetensorError, OSError) as err:
        raise ValueError(f"{str(file)!r} is not a readable safetensors file: {err}") from None


def _tensor_files(path: pathlib.Path) -> tuple[dict[str, pathlib.Path], bool]:
    """(tensor name -> the file holding it, whether an index said so); the index wins when there is one."""
    index = path / INDEX
    if index.exists():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError, TypeError) as err:
            raise ValueError(
                f"{str(index)!r} is not a safetensors index with a 'weight_map': {err!r}"
            ) from None
        if not isinstance(weight_map, dict):
            raise ValueError(f"{str(index)!r}: 'weight_map' must be an object, got {weight_map!r}")
        for name, file in weight_map.items():
            if not isinstance(file, str) or not file or pathlib.PurePath(file).name != file:
                raise ValueError(
                    f"{str(index)!r}: weight_map[{name!r}] must be a file name in the directory, got {file!r}"
                )
        files = {name: path / file for name, file in weight_map.items()}
        for file in sorted(set(files.values())):
            if not file.exists():
                raise ValueError(f"{str(index)!r} names shard {file.name!r}, which is not in {str(path)!r}")
        return files, True
    single = path / SINGLE
    if not single.exists():
        raise ValueError(f"{str(path)!r} has neither {SINGLE!r} nor {INDEX!r}")
    with _open(single) as f:
        return {name: single for name in f.keys()}, False


class _Reader:
    """Lazy reads from the files holding each tensor, after checking names and shapes against the config."""

    def __init__(self, path: pathlib.Path, expected: dict[str, tuple[int, ...]]):
        self.files, indexed = _tensor_files(path)
        missing = sorted(set(expected) - set(self.files))
        if missing:
            raise ValueError(
                f"checkpoint {str(path)!r} is missing tensor {missing[0]!r} ({len(missing)} missing)"
            )
        unexpected = sorted(set(self.files) - set(expected))
        if unexpected:
            raise ValueError(
                f"checkpoint {str(path)!r} has unexpected tensor {unexpected[0]!r} ({len(unexpected)} "
                "unexpected)"
            )
        self.handles: dict[pathlib.Path, Any] = {}
        try:
            for file in sorted(set(self.files.values())):
                self.handles[file] = _open(file)
            self._check(expected, indexed)
        except BaseException:
            self.close()
            raise

    def _check(self, expected: dict[str, tuple[int, ...]], indexed: bool) -> None:
        # Each file's names are read once: `keys()` builds the whole list per call, so asking it per tensor
        # took 92 s for the 18k expert tensors of a 48-layer, 128-expert model (quadratic in the count).
        names = {file: set(handle.keys()) for file, handle in self.handles.items()}
        if indexed:
            for file in self.handles:
                unlisted = sorted(n for n in names[file] if self.files.get(n) != file)
                if unlisted:
                    raise ValueError(
                        f"shard {file.name!r} holds tensor {unlisted[0]!r}, which the index does not assign "
                        f"to it ({len(unlisted)} such)"
                    )
        for name, shape in expected.items():
            handle = self.handles[self.files[name]]
            if name not in names[self.files[name]]:
                raise ValueError(
                    f"tensor {name!r} is listed for {self.files[name].name!r} but that file lacks it"
                )
            tensor = handle.get_slice(name)
            received = tuple(tensor.get_shape())
            if received != shape:
                raise ValueError(f"tensor {name!r} has shape {received}, expected {shape}")
            if tensor.get_dtype() not in STORED_DTYPES:
                raise ValueError(
                    f"tensor {name!r} is stored as {tensor.get_dtype()}, expected one of {STORED_DTYPES}"
                )

    def __call__(self, name: str) -> np.ndarray:
        return self.handles[self.files[name]].get_tensor(name)

    def close(self) -> None:
        for handle in self.handles.values():
            handle.__exit__(None, None, None)
        self.handles = {}


def load_hf(
    path: str | os.PathLike,
    dtype: str = "float32",
    *,
    compute_dtype: str | None = None,
    scan_layers: bool = True,
    remat: str | bool = False,
    mesh: Mesh | None = None,
    rules: Rules | None = None,
) -> Policy:
    """The policy stored in the HF checkpoint directory `path` (module docstring).

    With `mesh` (and optionally `rules`), every parameter is created directly with its sharding there.
    """
    path = pathlib.Path(path)
    if not path.is_dir():
        raise ValueError(f"load_hf: {str(path)!r} is not a directory")
    if dtype not in NUMPY_DTYPES:
        raise ValueError(f"load_hf: dtype must be one of {tuple(NUMPY_DTYPES)}, got {dtype!r}")
    config = ArchConfig.from_json_file(path / CONFIG)
    reader = _Reader(path, hf_shapes(config))
    try:
        return policy_from_tensors(
            config,
            reader,
            dtype=dtype,
            compute_dtype=compute_dtype,
            scan_layers=scan_layers,
            remat=remat,
            mesh=mesh,
            rules=rules,
        )
    finally:
        reader.close()


def _shards(tensors: dict[str, np.ndarray], max_bytes: int) -> list[dict[str, np.ndarray]]:
    """Consecutive groups (in name order) of at most max_bytes each; a larger tensor gets its own shard."""
    shards: list[dict[str, np.ndarray]] = [{}]
    size = 0
    for name in sorted(tensors):
        nbytes = tensors[name].nbytes
        if shards[-1] and size + nbytes > max_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = tensors[name]
        size += nbytes
    return shards


def _write_atomically(target: pathlib.Path, write: Callable[[pathlib.Path], object]) -> None:
    tmp = target.with_name(f".{target.name}.tmp")
    write(tmp)
    os.replace(tmp, target)


def _copy_source_files(source_dir: pathlib.Path, path: pathlib.Path) -> None:
    for item in sorted(source_dir.iterdir()):
        if (
            item.name == CONFIG
            or _is_weight_file(item.name)
            or item.resolve() == (path / item.name).resolve()
        ):
            continue
        if item.is_dir():
            shutil.copytree(item, path / item.name, dirs_exist_ok=True)
        else:
            shutil.copy2(item, path / item.name)


def save_hf(
    policy: Policy,
    path: str | os.PathLike,
    dtype: str = "bfloat16",
    *,
    source_dir: str | os.PathLike | None = None,
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
) -> pathlib.Path:
    """Writes `policy` to the HF checkpoint directory `path` (module docstring); returns `path`."""
    if not isinstance(policy, Policy):
        raise TypeError(f"save_hf: policy must be a Policy, got {type(policy).__name__}")
    if dtype not in NUMPY_DTYPES:
        raise ValueError(f"save_hf: dtype must be one of {tuple(NUMPY_DTYPES)}, got {dtype!r}")
    positive_int("save_hf: max_shard_bytes", max_shard_bytes)
    path = pathlib.Path(path)
    path.mkdir(parents=True, exist_ok=True)
    if source_dir is not None:
        source_dir = pathlib.Path(source_dir)
        if not source_dir.is_dir():
            raise ValueError(f"save_hf: source_dir {str(source_dir)!r} is not a directory")
        _copy_source_files(source_dir, path)
    tensors = policy_tensors(policy, dtype)
    for old in path.iterdir():
        if _is_weight_file(old.name):
            old.unlink()
    shards = _shards(tensors, max_shard_bytes)
    metadata = {"format": "pt"}
    if len(shards) == 1:
        _write_atomically(path / SINGLE, lambda tmp: save_file(shards[0], str(tmp), metadata=metadata))
    else:
        weight_map = {}
        for i, shard in enumerate(shards):
            name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
            _write_atomically(path / name, functools.partial(_save_shard, shard, metadata=metadata))
            weight_map.update({tensor: name for tensor in shard})
        index = {
            "metadata": {"total_size": int(sum(t.nbytes for t in tensors.values()))},
            "weight_map": weight_map,
        }
        _write_atomically(
            path / INDEX, lambda tmp: tmp.write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
        )
    config = policy.config.to_hf_dict(torch_dtype=dtype)
    _write_atomically(path / CONFIG, lambda tmp: tmp.write_text(json.dumps(config, indent=2) + "\n"))
    return path


def _save_shard(shard: dict[str, np.ndarray], tmp: pathlib.Path, *, metadata: dict[str, str]) -> None:
    save_file(shard, str(tmp), metadata=metadata)
