"""Orbax checkpoints: round trip, resharding, config refusal, atomicity under SIGKILL."""

import os
import pathlib
import signal
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from legorl_jax.config import CheckpointConfig
from legorl_jax.train.checkpoint import Checkpointer, CheckpointMismatchError, config_differences
from legorl_jax.train.state import TrainState, init_train_state

RUN_CONFIG = {
    "algo": {"loss": "gspo", "clip_low": 3e-4},
    "train": {"total_steps": 10, "checkpoint": {"every": 1}},
    "mesh": {"fsdp": 2},
    "seed": 0,
}


def make_state(seed=0, step=0):
    key = jax.random.key(seed)
    params = {"w": jax.random.normal(key, (8, 16)), "b": jnp.arange(16, dtype=jnp.float32)}
    state = init_train_state(params, optax.adamw(1e-3), seed=seed)
    grads = jax.tree.map(jnp.ones_like, params)
    updates, opt_state = optax.adamw(1e-3).update(grads, state.opt_state, params)
    return state.replace(
        step=jnp.asarray(step, jnp.int32), params=optax.apply_updates(params, updates), opt_state=opt_state
    )


def assert_states_equal(a: TrainState, b: TrainState):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_a_saved_state_restores_exactly_with_cursor_version_and_keeps_the_last_k(tmp_path):
    config = CheckpointConfig(directory=str(tmp_path), every=2, keep=2, async_save=True)
    with Checkpointer(config, run_config=RUN_CONFIG) as ckpt:
        for step in range(1, 7):
            saved = ckpt.maybe_save(
                make_state(step, step), cursor={"batch": step}, weights_version=f"v{step}"
            )
            assert saved == (step % 2 == 0)
        ckpt.wait()
        assert ckpt.all_steps() == [4, 6]  # keep=2: step 2 was deleted
        restored = ckpt.restore(make_state(0, 0))
    assert restored.step == 6 and restored.cursor == {"batch": 6} and restored.weights_version == "v6"
    assert_states_equal(restored.state, make_state(6, 6))


def test_a_save_is_due_whenever_a_multiple_of_every_was_reached_even_stepping_over_it(tmp_path):
    config = CheckpointConfig(directory=str(tmp_path), every=5, keep=5, async_save=False)
    with Checkpointer(config, run_config=RUN_CONFIG) as ckpt:
        # two updates per batch: steps 2, 4, 6, ...; multiples of 5 are stepped over, saves land at 6 and 10.
        saved = [
            s for s in range(2, 13, 2) if ckpt.maybe_save(make_state(0, s), cursor={}, weights_version="v")
        ]
        assert saved == [6, 10]
    with Checkpointer(config, run_config=RUN_CONFIG) as resumed:  # a new process knows the last save
        assert not resumed.should_save(12) and resumed.should_save(15)


def test_restore_places_arrays_on_the_target_shardings(tmp_path):
    config = CheckpointConfig(directory=str(tmp_path), every=1, keep=1, async_save=False)
    with Checkpointer(config, run_config=RUN_CONFIG) as ckpt:
        ckpt.maybe_save(make_state(3, 1), cursor={}, weights_version="v1")
    mesh = Mesh(np.asarray(jax.devices()[:8]).reshape(2, 4), ("fsdp", "tensor"))
    sharded = NamedSharding(mesh, PartitionSpec("fsdp", "tensor"))
    target = make_state(0, 0)
    target = target.replace(
        params={"w": jax.device_put(target.params["w"], sharded), "b": target.params["b"]}
    )
    with Checkpointer(config, run_config=RUN_CONFIG) as ckpt:
        restored = ckpt.restore(target)
    assert restored.state.params["w"].sharding == sharded
    assert len(restored.state.params["w"].addressable_shards) == 8
    np.testing.assert_array_equal(
        np.asarray(restored.state.params["w"]), np.asarray(make_state(3, 1).params["w"])
    )


def test_a_checkpoint_from_another_config_is_refused_naming_the_field(tmp_path):
    config = CheckpointConfig(directory=str(tmp_path), every=1, keep=1, async_save=False)
    with Checkpointer(config, run_config=RUN_CONFIG) as ckpt:
        ckpt.maybe_save(make_state(0, 1), cursor={}, weights_version="v1")
    other = {**RUN_CONFIG, "algo": {"loss": "ppo", "clip_low": 3e-4}}
    with Checkpointer(config, run_config=other) as ckpt, pytest.raises(CheckpointMismatchError) as err:
        ckpt.restore(make_state(0, 0))
    assert "algo.loss: 'gspo' -> 'ppo'" in str(err.value)
    assert "clip_low" not in str(err.value)
    # Fields that may change on resume: total steps, checkpoint settings, the mesh.
    resumable = {**RUN_CONFIG, "train": {"total_steps": 99, "checkpoint": {"every": 5}}, "mesh": {"fsdp": 4}}
    with Checkpointer(config, run_config=resumable) as ckpt:
        assert ckpt.restore(make_state(0, 0)).step == 1


def test_config_differences_report_added_and_removed_fields():
    diffs = config_differences({"a": {"b": 1}, "c": 2}, {"a": {"b": 1, "d": 3}}, ignore=[])
    assert diffs == ["a.d: '<absent>' -> 3", "c: 2 -> '<absent>'"]


def test_a_process_killed_mid_save_leaves_only_checkpoints_that_restore(tmp_path):
    # The child saves step 1 synchronously, then starts a large asynchronous save of step 2 and is
    # SIGKILLed before it can finish. Every step that is listed afterwards must restore bit for bit.
    script = textwrap.dedent(f"""
        import os, signal, jax, jax.numpy as jnp, optax
        from legorl_jax.config import CheckpointConfig
        from legorl_jax.train.checkpoint import Checkpointer
        from legorl_jax.train.state import init_train_state

        def state(step, value):
            params = {{"w": jnp.full((2048, 2048), value, jnp.float32)}}
            return init_train_state(params, optax.sgd(0.1), seed=0).replace(step=jnp.asarray(step, jnp.int32))

        config = CheckpointConfig(directory={str(tmp_path)!r}, every=1, keep=5, async_save=True)
        ckpt = Checkpointer(config, run_config={{}})
        ckpt.maybe_save(state(1, 1.0), cursor={{}}, weights_version="v1")
        ckpt.wait()
        ckpt.maybe_save(state(2, 2.0), cursor={{}}, weights_version="v2")
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": ""}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    # The kill landed mid-save: step 2 exists only as orbax's temporary directory.
    entries = sorted(os.listdir(tmp_path))
    assert "1" in entries and "2" not in entries and any(e.startswith("2.") for e in entries), entries

    config = CheckpointConfig(directory=str(tmp_path), every=1, keep=5, async_save=False)
    with Checkpointer(config, run_config={}) as ckpt:
        steps = ckpt.all_steps()
        assert steps == [1]
        for step in steps:
            template = init_train_state({"w": jnp.zeros((2048, 2048), jnp.float32)}, optax.sgd(0.1), seed=0)
            restored = ckpt.restore(template, step=step)
            assert (
                float(restored.state.params["w"].min())
                == float(restored.state.params["w"].max())
                == float(step)
            )


@pytest.mark.slow  # ~30 s; tests/loop/test_train_entry.py kills a whole run mid-step in the default suite
def test_a_run_killed_mid_run_resumes_to_the_weights_of_an_uninterrupted_run(tmp_path):
    # Three processes on the tiny MoE, batches a pure function of the step: an uninterrupted 5-step run;
    # a run SIGKILLed right after step 3 (its async save may still be in flight); a resumed run that
    # restores the latest complete checkpoint and trains on from its cursor. Nothing lost, nothing twice.
    worker = pathlib.Path(__file__).parent / "tiny_run.py"
    env = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": "",
        "JAX_COMPILATION_CACHE_DIR": str(tmp_path / "jax-cache"),
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
    }

    def run(*args, **kwargs):
        return subprocess.run(
            [sys.executable, str(worker), "--steps", "5", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            **kwargs,
        )

    straight = run("--checkpoint", str(tmp_path / "a"), "--out", str(tmp_path / "straight.npz"))
    assert straight.returncode == 0, straight.stderr[-3000:]

    killed = subprocess.Popen(
        [
            sys.executable,
            str(worker),
            "--steps",
            "5",
            "--checkpoint",
            str(tmp_path / "b"),
            "--out",
            str(tmp_path / "never.npz"),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    for line in killed.stdout:
        if line.strip() == "step 3":
            killed.send_signal(signal.SIGKILL)
            break
    assert killed.wait(timeout=120) == -signal.SIGKILL
    assert not (tmp_path / "never.npz").exists()

    resumed = run("--checkpoint", str(tmp_path / "b"), "--resume", "--out", str(tmp_path / "resumed.npz"))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    start = int(resumed.stdout.split("resumed ")[1].split()[0])
    assert 1 <= start <= 3
    a, b = np.load(tmp_path / "straight.npz"), np.load(tmp_path / "resumed.npz")
    assert a.files == b.files
    for name in a.files:
        np.testing.assert_array_equal(a[name], b[name])


def test_keep_3_leaves_3_checkpoints_without_an_orbax_warning_when_steps_are_listed_during_saves(
    tmp_path, caplog
):
    config = CheckpointConfig(directory=str(tmp_path), every=1, keep=3, async_save=True)
    with caplog.at_level("WARNING"), Checkpointer(config, run_config=RUN_CONFIG) as ckpt:
        for step in range(1, 6):
            assert ckpt.maybe_save(make_state(step, step), cursor={}, weights_version=f"v{step}")
            ckpt.all_steps()  # the async loop lists the steps while the save runs in the background
        ckpt.wait()
        assert ckpt.all_steps() == [3, 4, 5]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.isdigit()) == ["3", "4", "5"]
    assert not [r for r in caplog.records if "for deletion" in r.getMessage()]


def test_a_due_save_over_the_time_budget_is_put_off_and_save_unsaved_writes_it(tmp_path):
    # max_share 1e-9, cheap_s 0: any real save costs more than that share of the time since it, so the next
    # is put off.
    config = CheckpointConfig(
        directory=str(tmp_path), every=1, keep=5, async_save=False, max_share=1e-9, cheap_s=0.0
    )
    with Checkpointer(config, run_config=RUN_CONFIG) as ckpt:
        assert ckpt.maybe_save(make_state(1, 1), cursor={"next_step": 1}, weights_version="v1")
        prepared = []
        put_off = ckpt.maybe_save(
            make_state(2, 2),
            cursor={"next_step": 2},
            weights_version="v2",
            prepare=lambda: prepared.append(2),
        )
        assert not put_off and ckpt.unsaved_step == 2 and ckpt.all_steps() == [1] and prepared == []
        assert ckpt.save_unsaved() == 2 and prepared == [2] and ckpt.unsaved_step is None
        assert ckpt.maybe_save(make_state(3, 3), cursor={"next_step": 3}, weights_version="v3", force=True)
        assert ckpt.all_steps() == [1, 2, 3]
        restored = ckpt.restore(make_state(0, 0), step=2)
    assert restored.cursor == {"next_step": 2}
    assert_states_equal(restored.state, make_state(2, 2))


def test_a_put_off_step_whose_arrays_were_donated_is_not_saved(tmp_path):
    config = CheckpointConfig(
        directory=str(tmp_path), every=1, keep=5, async_save=False, max_share=1e-9, cheap_s=0.0
    )
    with Checkpointer(config, run_config=RUN_CONFIG) as ckpt:
        ckpt.maybe_save(make_state(1, 1), cursor={}, weights_version="v1")
        state = make_state(2, 2)
        ckpt.maybe_save(state, cursor={}, weights_version="v2")
        jax.jit(lambda s: s, donate_argnums=0)(state)  # what the next update does to the state's buffers
        assert ckpt.save_unsaved() is None and ckpt.all_steps() == [1]


def test_sigterm_saves_the_put_off_step_waits_for_the_save_and_exits_143(tmp_path):
    code = textwrap.dedent(f"""
        import asyncio, sys
        sys.path.insert(0, {str(pathlib.Path(__file__).parent)!r})
        from test_checkpoint import make_state, RUN_CONFIG
        from legorl_jax.config import CheckpointConfig
        from legorl_jax.train.checkpoint import Checkpointer, saving_on_signal

        async def main():
            config = CheckpointConfig(
                directory={str(tmp_path)!r}, every=1, keep=5, max_share=1e-9, cheap_s=0.0
            )
            with Checkpointer(config, run_config=RUN_CONFIG) as ckpt:
                with saving_on_signal(ckpt):
                    ckpt.maybe_save(make_state(1, 1), cursor={{}}, weights_version="v1")
                    ckpt.maybe_save(make_state(2, 2), cursor={{}}, weights_version="v2")  # put off
                    print("ready", ckpt.unsaved_step, flush=True)
                    await asyncio.sleep(600)

        asyncio.run(main())
    """)
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().split() == ["ready", "2"], proc.stderr.read()[-3000:]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 128 + signal.SIGTERM, proc.stderr.read()[-3000:]
    steps = sorted(int(p.name) for p in tmp_path.iterdir() if p.name.isdigit())
    assert steps == [1, 2]


def test_saves_that_block_for_less_than_cheap_s_are_never_put_off(tmp_path):
    config = CheckpointConfig(directory=str(tmp_path), every=1, keep=5, async_save=False, max_share=1e-9)
    with Checkpointer(config, run_config=RUN_CONFIG) as ckpt:  # cheap_s 1 s: a tiny state saves in less
        assert all(ckpt.maybe_save(make_state(s, s), cursor={}, weights_version=f"v{s}") for s in (1, 2, 3))
        assert ckpt.all_steps() == [1, 2, 3] and ckpt.unsaved_step is None
