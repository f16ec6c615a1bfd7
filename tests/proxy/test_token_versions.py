"""Weights versions on every sampled token: through a real proxy session whose engine reports an update
landing mid-request, into the session's Sequence, the archive, trajectory.json, the trainer's batch and
tools/inspect_trial.py; and the tokens an `in_place` update left sampled over old K/V, flagged the same
way."""

import dataclasses
import pathlib
import subprocess
import sys

import numpy as np
import openai
import pytest
from scripted_engine import BASH_TOOL, EXPERTS, LAYERS, TOP_K, tool_call_text

from legorl_jax.config import ProxyConfig
from legorl_jax.proxy.archive import ARRAYS, read_archive
from legorl_jax.proxy.recorder import Recorder, Renderer
from legorl_jax.rollout.store import load_trajectories, save_trajectories
from legorl_jax.train.batch import RoutingSpec, pack_trajectories
from legorl_jax.types import Generation, Outcome, Trajectory

SYSTEM = {"role": "system", "content": "You fix bugs."}
USER = {"role": "user", "content": "Fix calc.py."}
ROUTING = RoutingSpec(LAYERS, TOP_K, EXPERTS)
INSPECT = pathlib.Path(__file__).parents[2] / "tools" / "inspect_trial.py"


def _expected_versions(turns, per_turn):
    """int32[T] of the branch: each turn's output positions get `per_turn[i]` (a list per token), -1 else."""
    last = turns[-1]
    total = len(last["prompt_ids"]) + len(last["output_ids"])
    out = np.full(total, -1, np.int32)
    for turn, numbers in zip(turns, per_turn, strict=True):
        start = len(turn["prompt_ids"])
        out[start : start + len(turn["output_ids"])] = numbers
    return out


async def _bash_session(proxy, info, calls, *, before=lambda i: None):
    """`calls` chat calls of an agent running bash through the proxy session (each tool call answered),
    `before(i)` run before call i; the closed session's record."""
    client = openai.AsyncOpenAI(base_url=info.openai_base_url, api_key="x")
    history = [SYSTEM, USER]
    for i in range(calls):
        before(i)
        r = await client.chat.completions.create(model="p", messages=history, tools=[BASH_TOOL])
        msg = r.choices[0].message
        history.append(msg.model_dump(exclude_none=True))
        if msg.tool_calls:
            history.append({"role": "tool", "tool_call_id": msg.tool_calls[0].id, "content": "calc.py"})
    return await proxy.close_session(info.session_id)


async def test_an_update_mid_request_tags_each_token_with_its_version_through_archive_and_batch(
    scripted, serve, tmp_path
):
    call = tool_call_text("bash", '{"command": "ls"}', "Looking at the files first.")
    engine = scripted([call, call, "Done."])
    engine.weight_version = "default"  # the engine's starting weights: version 0
    proxy = await serve(engine)
    info = proxy.open_session("calc", "calc-0", trial_dir=tmp_path / "t")
    # The first call runs on version 0; the loop publishes step-000001 while the second call decodes, after
    # its 3rd token; the third call runs on version 1.

    def update_in_second_call(i):
        if i == 1:
            engine.update_mid_request(3, "step-000001")

    record = await _bash_session(proxy, info, 3, before=update_in_second_call)

    turns = record.turns
    n = [t["output_tokens"] for t in turns]
    per_turn = [[0] * n[0], [0] * 3 + [1] * (n[1] - 3), [1] * n[2]]
    expected = _expected_versions(turns, per_turn)
    (seq,) = record.sequences
    np.testing.assert_array_equal(seq.token_versions, expected)
    assert seq.weight_versions == ("default", "step-000001")
    # -1 exactly where nothing was sampled (prompt, tool result, the template's end-of-turn tokens).
    np.testing.assert_array_equal(seq.token_versions == -1, seq.loss_mask == 0)

    # trajectory.json: only the call the update landed in lists its tokens' versions.
    assert "token_weight_versions" not in turns[0] and "token_weight_versions" not in turns[2]
    assert turns[1]["token_weight_versions"] == ["default"] * 3 + ["step-000001"] * (n[1] - 3)
    assert [t["weight_version"] for t in turns] == ["default", "step-000001", "step-000001"]

    on_disk, arrays = read_archive(tmp_path / "t")
    assert on_disk["turns"][1]["token_weight_versions"] == turns[1]["token_weight_versions"]
    np.testing.assert_array_equal(arrays[0]["token_versions"], expected)
    assert arrays[0]["token_versions"].dtype == np.int32

    trajectory = Trajectory("calc-0", "calc", "g", record.sequences, 1.0, Outcome.SUBMITTED)
    assert trajectory.version_tokens == {0: n[0] + 3, 1: n[1] - 3 + n[2]}
    assert trajectory.oldest_version == 0 and trajectory.sampled_versions == {0, 1}

    batch, _ = pack_trajectories([trajectory], [1.0], max_tokens=len(expected) + 8, routing=ROUTING)
    # Target-aligned: the version at t is that of token t + 1; -1 wherever the target was not sampled.
    row = batch.token_versions[0]
    np.testing.assert_array_equal(row[: len(expected) - 1], expected[1:])
    assert (row[len(expected) - 1 :] == -1).all()
    np.testing.assert_array_equal(row >= 0, batch.loss_mask[0] > 0)
    # The second call's 3rd and 4th sampled tokens straddle the update.
    first = len(turns[1]["prompt_ids"])
    assert row[first - 1 + 2] == 0 and row[first - 1 + 3] == 1

    out = subprocess.run(
        [sys.executable, str(INSPECT), str(tmp_path / "t")], capture_output=True, text=True, check=True
    ).stdout
    assert "spans 2 weights versions: default, step-000001" in out
    assert f"turn 1 branch 0: default x3, step-000001 x{n[1] - 3}  (weights updated mid-call)" in out
    assert f"turn 0 branch 0: default x{n[0]}\n" in out and f"turn 2 branch 0: step-000001 x{n[2]}" in out
    assert f"sampled tokens per weights version v0 x{n[0] + 3}, v1 x{n[1] - 3 + n[2]}" in out
    assert f"v0 x3, v1 x{n[1] - 3}]" in out  # the second call's sampled span, split by version


async def test_tokens_an_in_place_update_sampled_over_old_kv_are_flagged_through_archive_store_and_batch(
    scripted, serve, tmp_path
):
    call = tool_call_text("bash", '{"command": "ls"}', "Looking at the files first.")
    engine = scripted([call, "Done."])
    engine.weight_version = "default"
    proxy = await serve(engine)
    info = proxy.open_session("calc", "calc-0", trial_dir=tmp_path / "t")
    # The first call's tokens from its 3rd on run on step-000001 over K/V of the weights before (in_place).
    engine.update_mid_request(2, "step-000001", stale_kv=True)
    record = await _bash_session(proxy, info, 2)

    turns = record.turns
    n = [t["output_tokens"] for t in turns]
    assert [t["stale_kv_tokens"] for t in turns] == [n[0] - 2, 0]
    first = len(turns[0]["prompt_ids"])
    expected = np.zeros(len(turns[1]["prompt_ids"]) + n[1], np.int8)
    expected[first + 2 : first + n[0]] = 1  # the first call's tokens after the update; none of the second's
    (seq,) = record.sequences
    np.testing.assert_array_equal(seq.stale_kv, expected)
    assert seq.stale_kv.dtype == np.int8 and not (seq.stale_kv > seq.loss_mask).any()
    _, arrays = read_archive(tmp_path / "t")
    np.testing.assert_array_equal(arrays[0]["stale_kv"], expected)

    trajectory = Trajectory("calc-0", "calc", "g", record.sequences, 1.0, Outcome.SUBMITTED)
    save_trajectories(tmp_path / "store", [trajectory])
    (loaded,) = load_trajectories(tmp_path / "store")
    np.testing.assert_array_equal(loaded.sequences[0].stale_kv, expected)
    batch, _ = pack_trajectories([loaded], [1.0], max_tokens=len(expected) + 8, routing=ROUTING)
    row = batch.stale_kv[0]  # target-aligned: position t flags token t + 1
    np.testing.assert_array_equal(row[: len(expected) - 1], expected[1:])
    assert row.sum() == n[0] - 2 and batch.token_versions[0][row > 0].tolist() == [1] * (n[0] - 2)

    # A record from before the flag existed (no stale_kv array) loads and packs as all fresh.
    fresh = Trajectory(
        "calc-1", "calc", "g", (dataclasses.replace(seq, stale_kv=None),), 1.0, Outcome.SUBMITTED
    )
    save_trajectories(tmp_path / "old", [fresh])
    with np.load(tmp_path / "old" / "arrays.npz") as data:
        assert not any(k.endswith("stale_kv") for k in data.files)
    (old,) = load_trajectories(tmp_path / "old")
    assert old.sequences[0].stale_kv is None
    old_batch, _ = pack_trajectories([old], [1.0], max_tokens=len(expected) + 8, routing=ROUTING)
    assert not old_batch.stale_kv.any()


async def test_an_archive_without_token_versions_still_reads_and_inspects(scripted, serve, tmp_path):
    engine = scripted(["Hi."])
    proxy = await serve(engine)
    info = proxy.open_session("calc", "calc-0", trial_dir=tmp_path / "t")
    client = openai.AsyncOpenAI(base_url=info.openai_base_url, api_key="x")
    await client.chat.completions.create(model="p", messages=[SYSTEM, USER])
    await proxy.close_session(info.session_id)
    # An archive written before versions were recorded: the same file less that array.
    path = tmp_path / "t" / ARRAYS
    with np.load(path) as data:
        kept = {k: data[k] for k in data.files if not k.endswith("token_versions")}
        assert len(kept) == len(data.files) - 1
    np.savez_compressed(path, **kept)
    _, arrays = read_archive(tmp_path / "t")
    assert "token_versions" not in arrays[0] and "token_ids" in arrays[0]
    out = subprocess.run(
        [sys.executable, str(INSPECT), str(tmp_path / "t")], capture_output=True, text=True, check=True
    ).stdout
    assert "sampled tokens per weights version not numbered (scripted)" in out
    assert "spans" not in out


async def test_a_recomputed_rerendered_token_gets_the_version_of_the_generation_it_followed(
    scripted, serve, tmp_path
):
    engine = scripted(["I will list the files now.", "next"])
    engine.weight_version = "step-000004"
    proxy = await serve(engine, ProxyConfig(shared_tokens="recompute"))
    info = proxy.open_session(trial_dir=tmp_path / "t")
    client = openai.AsyncOpenAI(base_url=info.openai_base_url, api_key="x")
    r = await client.chat.completions.create(model="p", messages=[SYSTEM, USER])
    engine.update_mid_request(0, "step-000005")  # the whole next call runs on step 5
    rewritten = [  # an edited user message: the same reply, re-rendered on a new branch
        SYSTEM,
        {"role": "user", "content": "Fix calc.py; add() subtracts."},
        {"role": "assistant", "content": r.choices[0].message.content},
        {"role": "user", "content": "go"},
    ]
    await client.chat.completions.create(model="p", messages=rewritten)
    record = await proxy.close_session(info.session_id)
    first, second = record.sequences
    assert record.branches[1]["recomputed"] > 0
    assert set(first.token_versions[first.loss_mask == 1].tolist()) == {4}
    # The re-rendered reply (scored on branch 1 right after the step-5 generation) and the new reply: step 5.
    prompt = record.turns[1]["prompt_tokens"]
    rescored = second.loss_mask[:prompt] == 1
    assert rescored.sum() == record.branches[1]["recomputed"]
    assert set(second.token_versions[:prompt][rescored].tolist()) == {5}
    assert set(second.token_versions[prompt:].tolist()) == {5}
    assert second.weight_versions == ("step-000005",)


async def test_versions_that_are_not_numbers_of_the_run_keep_their_names_and_no_numbers(
    scripted, serve, tmp_path
):
    engine = scripted(["Hi."])  # reports "scripted", while the proxy counts from "default"
    proxy = await serve(engine, initial_version="default")
    info = proxy.open_session(trial_dir=tmp_path / "t")
    client = openai.AsyncOpenAI(base_url=info.openai_base_url, api_key="x")
    await client.chat.completions.create(model="p", messages=[SYSTEM, USER])
    record = await proxy.close_session(info.session_id)
    (seq,) = record.sequences
    assert seq.token_versions is None and seq.weight_versions == ("scripted",)
    assert "token_versions" not in read_archive(tmp_path / "t")[1][0]
    trajectory = Trajectory("t", "t", "g", record.sequences, 0.0, Outcome.SUBMITTED)
    with pytest.raises(ValueError, match="'scripted' is neither a published version"):
        _ = trajectory.oldest_version
    batch, _ = pack_trajectories([trajectory], [0.0], max_tokens=256, routing=ROUTING)
    assert (batch.token_versions == -1).all()  # packed, its versions unknown


def test_an_engine_reporting_a_version_per_token_for_the_wrong_token_count_is_refused_before_recording(
    tokenizer,
):
    rec = Recorder(Renderer(tokenizer))
    plan = rec.plan([SYSTEM, USER], None, kind="main")
    gen = Generation(
        np.asarray([5, 6, 7], np.int32),
        np.full(3, -0.1, np.float32),
        None,
        "stop",
        "step-000001",
        len(plan.prompt_ids),
        token_weight_versions=("default", "step-000001"),
    )
    with pytest.raises(ValueError, match="token_weight_versions has 2 entries for 3 output tokens"):
        rec.commit(plan, gen, {"role": "assistant", "content": "x"}, turn=0)
    assert rec.branches == [] and rec.turn_versions == {}
