"""Benchmark of token_logprobs: reference vs chunked XLA vs Pallas, side by side, with the matmul floor.

    python tools/bench_logprobs.py                       # default sizes, every impl that runs here
    python tools/bench_logprobs.py --sizes 8192,1024,151936 --reps 1 --markdown out.md

For each (N, D, V) it times the forward (log-probs only) and the forward + backward (value and gradient
with respect to hidden and lm_head of a random linear function of the log-probs) of each implementation,
and measures a plain jnp matmul [N, D] @ [D, min(V, 8192)] in the same dtype in the same run. The floor is
2*N*D*V / matmul rate for the forward and 6*N*D*V / rate for forward + backward (logits, d_hidden and
d_lm_head products; recomputing the logits in the backward is extra work above the floor); "of floor" is
floor / time, i.e. the share of the measured matmul rate achieved.

Memory, two ways (both printed):
  XLA temp   `compiled.memory_analysis().temp_size_in_bytes`: the working memory XLA allocates beyond the
             arguments and outputs, read from the compiled program before it runs (a Pallas call's
             internal use is not in it).
  peak       on CPU the worker process's peak RSS (VmHWM, reset once the inputs exist, so the temporaries
             that built them do not count) minus its RSS at that point; on a GPU
             the device's peak_bytes_in_use minus the bytes in use once the inputs exist.
Each (size, impl) runs in its own worker process, so peaks never carry over between implementations; in a
worker the forward is measured before forward + backward, so the second peak covers both.

Before running a case it checks that the compiled program's arguments + temp fit in 80% of the memory
available (/proc/meminfo MemAvailable, or the device's free bytes) and reports it as skipped otherwise.

Without a GPU, `--ptxas-report PYTHON` checks the Pallas kernels' register and shared-memory fit on an
H200: it lowers the three kernels (default GPU BlockSizes, bf16 and fp32, with and without entropy) to
Triton IR through an abstract H200 device, then has PYTHON (any interpreter with the `triton` package)
compile that IR for sm_90 and run the bundled `ptxas -v`. It reads the IR through a private JAX hook
(`pallas_call_registration.lowering`), so it may need adjusting when JAX moves it.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time

DEFAULT_SIZES = ("2048,1024,32768", "2048,1024,151936", "8192,1024,151936")
FLOOR_FLOPS = {"forward": 2, "forward+backward": 6}  # multiples of N*D*V
MATMUL_COLUMNS = 8192


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _available_bytes(jax) -> int:
    device = jax.devices()[0]
    if device.platform != "cpu":
        stats = device.memory_stats() or {}
        return stats.get("bytes_limit", 0) - stats.get("bytes_in_use", 0)
    with open("/proc/meminfo") as f:
        info = dict(line.split(":", 1) for line in f)
    return int(info["MemAvailable"].split()[0]) * 1024


def _reset_peak(jax) -> None:
    """Forgets the CPU process's high-water mark so far (Linux: clear_refs 5 resets VmHWM).

    Building the inputs passes through numpy temporaries larger than the inputs themselves (a 600 MB
    lm_head is drawn, then scaled), and a lifetime peak would charge them to whichever impl runs next.
    """
    if jax.devices()[0].platform == "cpu":
        gc.collect()
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")


def _peak_bytes(jax) -> int:
    device = jax.devices()[0]
    if device.platform != "cpu":
        return (device.memory_stats() or {}).get("peak_bytes_in_use", 0)
    with open("/proc/self/status") as f:
        kib = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    return kib * 1024


def _in_use_bytes(jax) -> int:
    device = jax.devices()[0]
    if device.platform != "cpu":
        return (device.memory_stats() or {}).get("bytes_in_use", 0)
    return _rss_bytes()


def _time(fn, args, reps: int) -> float:
    import jax

    jax.block_until_ready(fn(*args))  # warm-up: first-touch allocation, autotuning
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def worker(
    impl: str, n: int, d: int, v: int, dtype_name: str, reps: int, chunk_n: int | None, chunk_v: int | None
) -> list[dict]:
    """Measures one implementation at one size in this process; returns one record per mode."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from legorl_jax.kernels.logprobs import ChunkSizes, token_logprobs

    dtype = jnp.dtype(dtype_name)
    rng = np.random.default_rng(0)
    hidden = jnp.asarray(rng.standard_normal((n, d), np.float32), dtype)
    lm_head = jnp.asarray(rng.standard_normal((d, v), np.float32) * (3 / np.sqrt(d)), dtype)
    targets = jnp.asarray(rng.integers(0, v, n), jnp.int32)
    weights = jnp.asarray(rng.standard_normal(n), jnp.float32)
    jax.block_until_ready((hidden, lm_head, targets, weights))
    _reset_peak(jax)
    baseline = _in_use_bytes(jax)

    if impl == "matmul":
        cols = lm_head[:, : min(v, MATMUL_COLUMNS)]
        matmul = jax.jit(lambda h, w: jnp.dot(h, w, preferred_element_type=jnp.float32))
        seconds = _time(matmul, (hidden, cols), reps)
        return [{"impl": impl, "rate": 2 * n * d * cols.shape[1] / seconds}]

    sizes = None
    if impl == "xla" and (chunk_n or chunk_v):
        sizes = ChunkSizes(**{k: x for k, x in (("chunk_n", chunk_n), ("chunk_v", chunk_v)) if x})

    def forward(h, w, t):
        return token_logprobs(h, w, t, impl=impl, block_sizes=sizes)

    def forward_backward(h, w, t):
        return jax.value_and_grad(lambda h, w: jnp.sum(weights * forward(h, w, t)), argnums=(0, 1))(h, w)

    records = []
    for mode, fn in (("forward", forward), ("forward+backward", forward_backward)):
        record = {"impl": impl, "mode": mode}
        try:
            compiled = jax.jit(fn).lower(hidden, lm_head, targets).compile()
            analysis = compiled.memory_analysis()
            record["temp_bytes"] = analysis.temp_size_in_bytes
            need = (
                analysis.argument_size_in_bytes + analysis.temp_size_in_bytes + analysis.output_size_in_bytes
            )
            available = _available_bytes(jax)
            if need > 0.8 * available:
                record["skipped"] = f"needs {need / 2**30:.1f} GiB, {available / 2**30:.1f} GiB available"
            else:
                record["seconds"] = _time(compiled, (hidden, lm_head, targets), reps)
                record["peak_bytes"] = _peak_bytes(jax) - baseline
        except Exception as error:  # a backend that cannot lower the kernel is a result to print, not a crash
            record["skipped"] = f"{type(error).__name__}: {str(error).splitlines()[0][:80]}"
        records.append(record)
    return records


def _run_worker(args, impl: str, n: int, d: int, v: int) -> list[dict]:
    argv = [
        sys.executable,
        __file__,
        "--worker",
        impl,
        "--sizes",
        f"{n},{d},{v}",
        "--dtype",
        args.dtype,
        "--reps",
        str(args.reps),
    ]
    for flag in ("chunk_n", "chunk_v"):
        if getattr(args, flag):
            argv += [f"--{flag.replace('_', '-')}", str(getattr(args, flag))]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        reason = (done.stderr.strip().splitlines() or ["no output"])[-1][:80]
        return [{"impl": impl, "mode": m, "skipped": f"worker failed: {reason}"} for m in FLOOR_FLOPS]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _mib(x) -> str:
    return "-" if x is None else f"{x / 2**20:,.0f}"


def _table(n: int, d: int, v: int, rate: float | None, records: list[dict]) -> list[str]:
    measured = (
        f"matmul {rate / 1e12:.3f} TFLOP/s measured" if rate else "matmul rate not measured (worker failed)"
    )
    lines = [
        f"N={n} D={d} V={v}: {measured}; fp32 logits would be {n * v * 4 / 2**30:.2f} GiB",
        "",
        "| mode | impl | time (ms) | × reference | of matmul floor | XLA temp (MiB) | temp ÷ reference | "
        "peak (MiB) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for mode, multiple in FLOOR_FLOPS.items():
        floor = multiple * n * d * v / rate if rate else float("nan")
        rows = [r for r in records if r.get("mode") == mode]
        ref = next((r for r in rows if r["impl"] == "reference"), {})
        for r in rows:
            if "skipped" in r:
                lines.append(
                    f"| {mode} | {r['impl']} | skipped: {r['skipped']} | | | {_mib(r.get('temp_bytes'))} | | "
                    "|"
                )
                continue
            ratio = f"{r['seconds'] / ref['seconds']:.2f}" if "seconds" in ref else "-"
            temp_ratio = f"{r['temp_bytes'] / ref['temp_bytes']:.4f}" if ref.get("temp_bytes") else "-"
            lines.append(
                f"| {mode} | {r['impl']} | {r['seconds'] * 1e3:,.1f} | {ratio} | {floor / r['seconds']:.0%} "
                f"| {_mib(r['temp_bytes'])} | {temp_ratio} | {_mib(r['peak_bytes'])} |"
            )
    return lines + [""]


_PTXAS_SCRIPT = """
import glob, json, os, re, subprocess, sys
import triton
from triton.backends.compiler import GPUTarget
folder, warps, stages = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ptxas = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
for path in sorted(glob.glob(os.path.join(folder, "*.ttir"))):
    kernel = triton.compile(path, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, "num_stages": stages})
    with open(path + ".ptx", "w") as f:
        f.write(kernel.asm["ptx"])
    log = subprocess.run([ptxas, "-arch=sm_90a", "-v", path + ".ptx", "-o", os.devnull], capture_output=True,
                         text=True).stderr
    spills = re.search(r"(\\d+) bytes spill stores, (\\d+) bytes spill loads", log)
    print(json.dumps({"name": os.path.basename(path)[:-5], "shared": kernel.metadata.shared,
                      "registers": int(re.search(r"Used (\\d+) registers", log).group(1)),
                      "spill_bytes": sum(map(int, spills.groups())) if spills else None}))
"""  # noqa: E501 - script lines kept whole


def ptxas_report(triton_python: str, hidden_dim: int) -> list[str]:
    """Registers, spills and shared memory per kernel on an H200, compiled here from the kernels' Triton
    IR."""
    import tempfile

    import jax
    import jax.numpy as jnp
    from jax._src.pallas.triton import pallas_call_registration
    from jax.sharding import AbstractDevice, AbstractMesh, use_abstract_mesh

    from legorl_jax.kernels.logprobs import BlockSizes, kernel, online_softmax

    sizes = BlockSizes.for_platform("gpu", hidden_dim)
    common = {"inv_temperature": 1.0, "sizes": sizes, "platform": "gpu", "interpret": False}
    lower_to_triton = pallas_call_registration.lowering.lower_jaxpr_to_triton_module
    modules = []

    def capture(*args, **kwargs):
        result = lower_to_triton(*args, **kwargs)
        modules.append(result.module.operation.get_asm())
        return result

    h200 = AbstractMesh(
        (1,), ("x",), abstract_device=AbstractDevice(device_kind="NVIDIA H200", num_cores=132, platform="gpu")
    )
    folder = tempfile.mkdtemp(prefix="ttir_")
    pallas_call_registration.lowering.lower_jaxpr_to_triton_module = capture
    try:
        for dtype in (jnp.bfloat16, jnp.float32):
            for with_entropy in (False, True):

                def forward_backward(h, w, t, with_entropy=with_entropy):
                    r = kernel.forward(h, w, t, with_entropy=with_entropy, **common)
                    rows = online_softmax.BackwardRows(t, r.lse, r.mean_logit, r.lse, r.entropy)
                    return kernel.backward(h, w, rows, **common)

                args = (
                    jax.ShapeDtypeStruct((8192, hidden_dim), dtype),
                    jax.ShapeDtypeStruct((hidden_dim, 151_936), dtype),
                    jax.ShapeDtypeStruct((8192,), jnp.int32),
                )
                modules.clear()
                with use_abstract_mesh(h200):
                    jax.jit(forward_backward).trace(*args).lower(lowering_platforms=("cuda",))
                tag = f"{jnp.dtype(dtype).name}{'_entropy' if with_entropy else ''}"
                for name, text in zip(("forward", "d_hidden", "d_lm_head"), modules, strict=True):
                    with open(os.path.join(folder, f"{name}_{tag}.ttir"), "w") as f:
                        f.write(text)
    finally:
        pallas_call_registration.lowering.lower_jaxpr_to_triton_module = lower_to_triton
    done = subprocess.run(
        [triton_python, "-c", _PTXAS_SCRIPT, folder, str(sizes.num_warps), str(sizes.num_stages)],
        capture_output=True,
        text=True,
        check=True,
    )
    lines = [
        f"Triton sm_90 compile of the Pallas kernels (D={hidden_dim}, {sizes}); IR in {folder}",
        "",
        "| kernel | registers / thread | spill bytes | shared memory (KiB) |",
        "|---|---|---|---|",
    ]
    for row in map(json.loads, done.stdout.splitlines()):
        lines.append(
            f"| {row['name']} | {row['registers']} | {row['spill_bytes']} | {row['shared'] / 1024:.0f} |"
        )
    return lines + [""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=list(DEFAULT_SIZES), help="N,D,V triples")
    parser.add_argument(
        "--impls", default=None, help="comma list of reference,xla,pallas (default: what runs here)"
    )
    parser.add_argument(
        "--dtype", default=None, help="float32 or bfloat16 (default: bf16 on GPU/TPU, fp32 on CPU)"
    )
    parser.add_argument("--reps", type=int, default=3, help="timed repetitions after one warm-up (median)")
    parser.add_argument("--chunk-n", type=int, default=None, help="xla path ChunkSizes.chunk_n override")
    parser.add_argument("--chunk-v", type=int, default=None, help="xla path ChunkSizes.chunk_v override")
    parser.add_argument("--markdown", default=None, help="also write the tables to this file")
    parser.add_argument(
        "--ptxas-report",
        default=None,
        metavar="PYTHON",
        help="instead of timing: compile the kernels for an H200 with PYTHON's triton; print ptxas figures",
    )
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.ptxas_report:
        print("\n".join(ptxas_report(args.ptxas_report, hidden_dim=int(args.sizes[0].split(",")[1]))))
        return

    if args.worker:
        ((n, d, v),) = [tuple(int(x) for x in s.split(",")) for s in args.sizes]
        print(json.dumps(worker(args.worker, n, d, v, args.dtype, args.reps, args.chunk_n, args.chunk_v)))
        return

    import jax

    backend = jax.default_backend()
    args.dtype = args.dtype or ("float32" if backend == "cpu" else "bfloat16")
    impls = (
        args.impls.split(",")
        if args.impls
        else ["reference", "xla"] + (["pallas"] if backend != "cpu" else [])
    )
    header = [
        f"backend {backend} ({jax.devices()[0].device_kind}), dtype {args.dtype}, median of {args.reps} "
        f"after a warm-up; command: python tools/bench_logprobs.py {' '.join(sys.argv[1:])}",
        "",
    ]
    print("\n".join(header), flush=True)
    out = list(header)
    for size in args.sizes:
        n, d, v = (int(x) for x in size.split(","))
        rate = _run_worker(args, "matmul", n, d, v)[0].get("rate")
        records = []
        for impl in impls:
            records += _run_worker(args, impl, n, d, v)
            print(f"# N={n} D={d} V={v} {impl}: {json.dumps(records[-2:])}", file=sys.stderr, flush=True)
        lines = _table(n, d, v, rate, records)
        print("\n".join(lines), flush=True)
        out += lines
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
