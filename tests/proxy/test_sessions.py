"""Sessions: the admin API, retries, concurrency, side conversations, no-tool collapse and the archive."""

import asyncio
import dataclasses
import json
import subprocess
import sys

import aiohttp
import numpy as np
import openai
import pytest
from scripted_engine import BASH_TOOL, tool_call_text

from legorl_jax.config import ProxyConfig
from legorl_jax.proxy.archive import read_archive
from legorl_jax.proxy.session import termination_text
from legorl_jax.types import SessionFlags

SYSTEM = {"role": "system", "content": "You fix bugs."}
USER = {"role": "user", "content": "Fix calc.py."}
ADMIN = {"Authorization": "Bearer test-admin-token"}
TOOLS_ROOT = __import__("pathlib").Path(__file__).parents[2] / "tools"


async def test_admin_api_opens_reads_and_closes_a_session_into_its_trial_folder(scripted, serve, tmp_path):
    proxy = await serve(scripted(["Hi."]))
    async with aiohttp.ClientSession() as http:
        body = {
            "task_id": "calc",
            "trial_id": "calc-0",
            "metadata": {"step": 3},
            "trial_dir": "trial",  # taken inside the proxy's archive dir
        }
        async with http.post(proxy.base_url + "/admin/sessions", json=body, headers=ADMIN) as resp:
            assert resp.status == 201
            info = await resp.json()
        sid = info["session_id"]
        assert len(sid) == 32 and int(sid, 16) >= 0  # 128 random bits
        assert info["openai_base_url"] == f"{proxy.base_url}/s/{sid}/v1"
        assert info["anthropic_base_url"] == f"{proxy.base_url}/s/{sid}"
        client = openai.AsyncOpenAI(base_url=info["openai_base_url"], api_key="x")
        await client.chat.completions.create(model="p", messages=[SYSTEM, USER])
        async with http.get(f"{proxy.base_url}/admin/sessions/{sid}/trajectory", headers=ADMIN) as resp:
            trajectory = await resp.json()
        (turn,) = trajectory["turns"]
        assert trajectory["task_id"] == "calc" and trajectory["metadata"] == {"step": 3}
        assert (
            turn["branch"] == 0 and turn["finish_reason"] == "stop" and turn["weight_version"] == "scripted"
        )
        assert len(turn["output_logprobs"]) == len(turn["output_ids"]) and turn["prompt_ids"]
        async with http.delete(f"{proxy.base_url}/admin/sessions/{sid}", headers=ADMIN) as resp:
            closed = await resp.json()
        archive = (tmp_path / "proxy-archive").resolve()
        assert closed["trial_dir"] == str(archive / "trial") and closed["sequences"] == 1
        names = ("context_overflow", "no_tool_collapse", "format_failure", "engine_failed")
        no_flags = dict.fromkeys(names, False)
        assert closed["flags"] == no_flags
        async with http.get(f"{proxy.base_url}/admin/sessions/{sid}/trajectory", headers=ADMIN) as resp:
            assert resp.status == 404
    on_disk, arrays = read_archive(archive / "trial")
    assert on_disk["turns"][0]["output_ids"] == turn["output_ids"]
    assert on_disk["flags"] == no_flags and SessionFlags.from_dict(on_disk["flags"]) == SessionFlags()
    ids = arrays[0]["token_ids"].tolist()
    assert ids == turn["prompt_ids"] + turn["output_ids"]
    assert arrays[0]["loss_mask"].tolist() == [0] * len(turn["prompt_ids"]) + [1] * len(turn["output_ids"])
    np.testing.assert_allclose(
        arrays[0]["behaviour_logprobs"][len(turn["prompt_ids"]) :], turn["output_logprobs"]
    )
    assert arrays[0]["routed_experts"].shape == (len(ids), 2, 2)


@pytest.mark.parametrize(
    "headers", [{}, {"Authorization": "Bearer wrong-token"}, {"Authorization": "test-admin-token"}]
)
async def test_a_wrong_or_missing_admin_token_is_a_401_that_touches_nothing(scripted, serve, headers):
    proxy = await serve(scripted(["x"]))
    info = proxy.open_session()
    async with aiohttp.ClientSession() as http:
        for method, path in (
            ("POST", "/admin/sessions"),
            ("GET", f"/admin/sessions/{info.session_id}/trajectory"),
            ("DELETE", f"/admin/sessions/{info.session_id}"),
        ):
            async with http.request(method, proxy.base_url + path, json={}, headers=headers) as resp:
                assert resp.status == 401, (method, path)
    assert list(proxy.sessions) == [info.session_id]


async def test_admin_open_rejects_unknown_fields_and_bad_values_by_name(scripted, serve):
    proxy = await serve(scripted(["x"]))
    async with aiohttp.ClientSession() as http:
        for body, fragment in (
            ({"task": "x"}, "unknown fields ['task']"),
            ({"metadata": [1]}, "metadata must be an object"),
        ):
            async with http.post(proxy.base_url + "/admin/sessions", json=body, headers=ADMIN) as resp:
                assert resp.status == 400
                assert fragment in (await resp.json())["error"]["message"]


async def test_a_retried_request_gets_the_same_answer_and_appends_once(scripted, serve):
    engine = scripted(["first answer", "second answer"], delay_s=0.2)
    proxy = await serve(engine)
    info = proxy.open_session()
    client = openai.AsyncOpenAI(base_url=info.openai_base_url, api_key="x")
    body = dict(model="p", messages=[SYSTEM, USER])
    # One retry while the first is in flight, one after it was answered.
    a, b = await asyncio.gather(
        client.chat.completions.create(**body), client.chat.completions.create(**body)
    )
    c = await client.chat.completions.create(**body)
    assert (
        a.choices[0].message.content
        == b.choices[0].message.content
        == c.choices[0].message.content
        == "first answer"
    )
    assert a.id == b.id == c.id
    session = proxy.sessions[info.session_id]
    assert len(engine.calls) == 1 and len(session.turns) == 1 and session.counters["retries"] == 2


async def test_a_client_that_hangs_up_does_not_lose_the_turn_its_retry_gets(scripted, serve):
    engine = scripted(["slow answer"], delay_s=0.5)
    proxy = await serve(engine)
    info = proxy.open_session()
    body = {"model": "p", "messages": [SYSTEM, USER]}
    async with aiohttp.ClientSession() as http:
        with pytest.raises(asyncio.TimeoutError):
            async with http.post(
                info.openai_base_url + "/chat/completions",
                json=body,
                timeout=aiohttp.ClientTimeout(total=0.1),
            ):
                pass
        async with http.post(info.openai_base_url + "/chat/completions", json=body) as resp:
            reply = await resp.json()
    assert reply["choices"][0]["message"]["content"] == "slow answer"
    assert len(engine.calls) == 1 and len(proxy.sessions[info.session_id].turns) == 1


async def test_sixty_four_sessions_of_ten_calls_concurrently_record_every_turn_once(scripted, serve):
    def script(prompt, rid):
        sid, turn = rid.rsplit("-", 1)
        return tool_call_text("bash", json.dumps({"command": f"echo {sid[:6]} {turn}"}))

    engine = scripted(script, delay_s=0.002)
    proxy = await serve(engine, ProxyConfig(context_length=8192))

    async def trial(i):
        info = proxy.open_session(task_id=f"task-{i % 8}", trial_id=f"trial-{i}")
        messages = [SYSTEM, {"role": "user", "content": f"task {i}"}]
        async with openai.AsyncOpenAI(base_url=info.openai_base_url, api_key="x") as client:
            for turn in range(10):
                r = await client.chat.completions.create(model="p", messages=messages, tools=[BASH_TOOL])
                msg = r.choices[0].message
                assert (
                    json.loads(msg.tool_calls[0].function.arguments)["command"]
                    == f"echo {info.session_id[:6]} {turn}"
                )
                messages = [
                    *messages,
                    msg.model_dump(exclude_none=True),
                    {"role": "tool", "tool_call_id": msg.tool_calls[0].id, "content": f"out {turn}"},
                ]
        return info.session_id

    sids = await asyncio.gather(*(trial(i) for i in range(64)))
    assert len(engine.calls) == 640
    for sid in sids:
        session = proxy.sessions[sid]
        assert len(session.turns) == 10 and len(session.recorder.branches) == 1
        assert session.counters["tool_calls_per_turn"] == [1] * 10
        b = session.recorder.branches[0]
        assert sum(b.mask) == sum(len(t.output_ids) for t in session.turns)


async def test_a_side_conversation_stays_out_of_training_and_is_counted(scripted, serve):
    engine = scripted(["Fix calc sign", tool_call_text("bash", '{"command": "ls"}'), "A summary.", "done"])
    proxy = await serve(engine)
    info = proxy.open_session()
    client = openai.AsyncOpenAI(base_url=info.openai_base_url, api_key="x")
    title = [
        {"role": "system", "content": "You are a title generator. You output ONLY a thread title."},
        USER,
    ]
    await client.chat.completions.create(
        model="p", messages=title
    )  # OpenCode sends this before the agent call
    r = await client.chat.completions.create(model="p", messages=[SYSTEM, USER], tools=[BASH_TOOL])
    await client.chat.completions.create(
        model="p", messages=[{"role": "system", "content": "Summarise."}, USER]
    )
    msg = r.choices[0].message
    history = [
        SYSTEM,
        USER,
        msg.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": msg.tool_calls[0].id, "content": "x"},
    ]
    await client.chat.completions.create(model="p", messages=history, tools=[BASH_TOOL])
    session = proxy.sessions[info.session_id]
    assert [b.kind for b in session.recorder.branches] == ["side", "main", "side"]
    assert session.counters["side_calls"] == 2 and session.counters["main_calls"] == 2
    closed = await proxy.close_session(info.session_id)
    (seq,) = closed.sequences
    main = session.recorder.branches[1]
    assert seq.token_ids.tolist() == main.ids.tolist()


async def test_consecutive_replies_without_a_tool_call_end_the_session(scripted, serve):
    engine = scripted(["thinking aloud"] * 5)
    proxy = await serve(engine, ProxyConfig(max_consecutive_no_tool=2))
    info = proxy.open_session()
    client = openai.AsyncOpenAI(base_url=info.openai_base_url, api_key="x")
    messages = [SYSTEM, USER]
    replies = []
    for _ in range(4):
        r = await client.chat.completions.create(model="p", messages=messages, tools=[BASH_TOOL])
        replies.append(r.choices[0].message.content)
        messages = [
            *messages,
            {"role": "assistant", "content": replies[-1]},
            {"role": "user", "content": "use a tool"},
        ]
    assert replies[:2] == ["thinking aloud"] * 2
    assert replies[2] == replies[3] == termination_text(3)
    session = proxy.sessions[info.session_id]
    assert session.flags.no_tool_collapse and len(engine.calls) == 3  # the fourth call generated nothing
    assert session.recorder.branches[0].turns == [0, 1, 2]


async def test_the_rollout_reads_flags_finds_and_closes_a_session_through_typed_records(
    scripted, serve, tmp_path
):
    engine = scripted(["thinking aloud"] * 3)
    proxy = await serve(engine, ProxyConfig(max_consecutive_no_tool=1))
    info = proxy.open_session("calc", "calc-0", trial_dir=tmp_path / "t")
    assert proxy.find_session("calc-0", tmp_path / "t") == info.session_id
    assert proxy.find_session("calc-0", tmp_path / "other") is None
    client = openai.AsyncOpenAI(base_url=info.openai_base_url, api_key="x")
    messages = [SYSTEM, USER]
    for _ in range(3):
        r = await client.chat.completions.create(model="p", messages=messages, tools=[BASH_TOOL])
        messages = [
            *messages,
            {"role": "assistant", "content": r.choices[0].message.content},
            {"role": "user", "content": "use a tool"},
        ]
    flags = proxy.session_flags(info.session_id)
    assert flags.no_tool_collapse and not flags.engine_failed
    # the session's own flags are not the caller's to change
    with pytest.raises(dataclasses.FrozenInstanceError):
        flags.engine_failed = True  # type: ignore[misc]
    assert not proxy.sessions[info.session_id].flags.engine_failed
    record = await proxy.close_session(info.session_id)
    assert proxy.session_flags(info.session_id) == SessionFlags()
    assert proxy.find_session("calc-0", tmp_path / "t") is None
    assert record.session_id == info.session_id and record.trial_dir == tmp_path / "t"
    assert record.flags.no_tool_collapse and record.counters["no_tool_replies"] == len(engine.calls) == 2
    assert len(record.turns) == 2 and all(t["output_tokens"] > 0 for t in record.turns)
    assert record.messages[0] == SYSTEM and [b["kind"] for b in record.branches] == ["main"]
    assert record.model_s == record.counters["model_s"] > 0.0 and len(record.sequences) == 1


async def test_inspect_trial_prints_each_span_marked_sampled_or_context(scripted, serve, tmp_path):
    engine = scripted([tool_call_text("bash", '{"command": "ls"}', "Looking."), "Done."])
    proxy = await serve(engine)
    info = proxy.open_session("calc", "calc-0", trial_dir=tmp_path / "t")
    client = openai.AsyncOpenAI(base_url=info.openai_base_url, api_key="x")
    r = await client.chat.completions.create(model="p", messages=[SYSTEM, USER], tools=[BASH_TOOL])
    msg = r.choices[0].message
    history = [
        SYSTEM,
        USER,
        msg.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": msg.tool_calls[0].id, "content": "calc.py"},
    ]
    await client.chat.completions.create(model="p", messages=history, tools=[BASH_TOOL])
    await proxy.close_session(info.session_id)
    out = subprocess.run(
        [sys.executable, str(TOOLS_ROOT / "inspect_trial.py"), str(tmp_path / "t")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "branch 0 (main, first)" in out
    assert "[sampled" in out and "[context" in out
    assert "Looking." in out and "Done." in out and "calc.py" in out
    assert "routing coverage" in out and "1.000" in out.split("routing coverage")[1][:40]
