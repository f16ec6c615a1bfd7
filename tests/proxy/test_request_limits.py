"""The proxy's limits on what a client controls: how deep a body nests, and where a session is archived."""

import aiohttp
import openai
import orjson
import pytest

from legorl_jax.config import ProxyConfig
from legorl_jax.proxy.app import TrialDirInUse
from legorl_jax.proxy.archive import TRAJECTORY, read_archive
from legorl_jax.proxy.nesting import deepest_field, deepest_field_in_text

ADMIN = {"Authorization": "Bearer test-admin-token"}
USER = {"role": "user", "content": "Fix calc.py."}


def nested_schema_text(depth: int) -> str:
    """A JSON schema `depth` objects deep, as text: the stdlib's encoder cannot write one this deep."""
    return '{"type": "object", "properties": {"a": ' * depth + '{"type": "string"}' + "}}" * depth


def body_text(surface: str, depth: int) -> bytes:
    schema = nested_schema_text(depth)
    if surface == "openai":
        tools = f'[{{"type": "function", "function": {{"name": "bash", "parameters": {schema}}}}}]'
        head = '{"model": "p", "messages": [{"role": "user", "content": "hi"}], '
    else:
        tools = f'[{{"name": "bash", "input_schema": {schema}}}]'
        head = '{"model": "p", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}], '
    return (head + f'"tools": {tools}}}').encode()


@pytest.mark.parametrize("depth", [130, 10_000])
@pytest.mark.parametrize(
    ("surface", "path", "field"),
    [
        ("openai", "/v1/chat/completions", "tools[0].function.parameters.properties"),
        ("anthropic", "/v1/messages", "tools[0].input_schema.properties"),
    ],
)
async def test_a_tool_schema_nested_too_deep_is_a_400_naming_the_field(
    scripted, serve, surface, path, field, depth
):
    engine = scripted(["never sampled"])
    proxy = await serve(engine)
    info = proxy.open_session()
    url = f"{proxy.base_url}/s/{info.session_id}{path}"
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession() as http:
        async with http.post(url, data=body_text(surface, depth), headers=headers) as resp:
            assert resp.status == 400
            error = (await resp.json())["error"]
    # Past 1,024 levels the JSON parser refuses the text before any field is known (the text scan names it).
    assert error["message"].startswith(field), error["message"]
    assert "deeper than 64 levels" in error["message"]
    if surface == "openai":
        assert error["param"].startswith(field) and error["type"] == "invalid_request_error"
    assert engine.calls == [] and proxy.sessions[info.session_id].turns == []


async def test_a_tool_schema_within_the_depth_limit_is_served(scripted, serve):
    proxy = await serve(scripted(["Hi."]), ProxyConfig(max_json_depth=20))
    info = proxy.open_session()
    async with aiohttp.ClientSession() as http:
        # body(1) > tools(2) > tool(3) > function(4) > schema: 2 levels per object+properties pair and the
        # innermost object, so 7 pairs reach depth 20 and 8 pairs 22
        url = f"{proxy.base_url}/s/{info.session_id}/v1/chat/completions"
        data = body_text("openai", 7)
        async with http.post(url, data=data, headers={"Content-Type": "application/json"}) as resp:
            assert resp.status == 200, await resp.text()
        async with http.post(
            url, data=body_text("openai", 8), headers={"Content-Type": "application/json"}
        ) as r:
            assert r.status == 400


async def test_admin_metadata_nested_too_deep_is_a_400_naming_the_field(scripted, serve):
    proxy = await serve(scripted(["x"]))
    data = ('{"task_id": "t", "metadata": ' + '{"k": ' * 500 + "1" + "}" * 500 + "}").encode()
    async with aiohttp.ClientSession() as http:
        async with http.post(proxy.base_url + "/admin/sessions", data=data, headers=ADMIN) as resp:
            assert resp.status == 400
            error = (await resp.json())["error"]
    assert error["param"].startswith("metadata.k.k") and proxy.sessions == {}


def test_the_text_scan_and_the_parsed_walk_name_the_same_field():
    text = body_text("openai", 40).replace(b'"hi"', b'"a [tricky] {\\"string\\": [1, 2]}"')
    for limit in (3, 6, 20, 64):
        assert deepest_field_in_text(text, limit) == deepest_field(orjson.loads(text), limit), limit
    assert deepest_field(orjson.loads(text), 200) is None and deepest_field_in_text(text, 200) is None
    assert deepest_field({"a": [1, {"b": [[2]]}]}, 3) == "a[1].b"


@pytest.mark.parametrize("trial_dir", ["../outside", "a/../../outside", "/etc/legorl", ".", ""])
async def test_admin_trial_dir_outside_the_archive_dir_is_a_400(scripted, serve, tmp_path, trial_dir):
    proxy = await serve(scripted(["x"]))
    async with aiohttp.ClientSession() as http:
        body = {"task_id": "t", "trial_dir": trial_dir}
        async with http.post(proxy.base_url + "/admin/sessions", json=body, headers=ADMIN) as resp:
            assert resp.status == 400
            error = (await resp.json())["error"]
    assert error["param"] == "trial_dir" and "trial_dir" in error["message"]
    assert proxy.sessions == {} and not (tmp_path / "outside").exists()


async def test_admin_trial_dir_through_a_link_out_of_the_archive_dir_is_a_400(scripted, serve, tmp_path):
    proxy = await serve(scripted(["x"]))
    (tmp_path / "proxy-archive").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "proxy-archive" / "link").symlink_to(tmp_path / "elsewhere")
    async with aiohttp.ClientSession() as http:
        body = {"trial_dir": "link/t"}
        async with http.post(proxy.base_url + "/admin/sessions", json=body, headers=ADMIN) as resp:
            assert resp.status == 400
    assert proxy.sessions == {}


async def test_admin_trial_dir_of_an_open_or_archived_session_is_a_409(scripted, serve, tmp_path):
    proxy = await serve(scripted(["Hi.", "Hi."]))
    archive = tmp_path / "proxy-archive"
    async with aiohttp.ClientSession() as http:

        async def open_(trial_dir):
            body = {"task_id": "t", "trial_dir": trial_dir}
            async with http.post(proxy.base_url + "/admin/sessions", json=body, headers=ADMIN) as resp:
                return resp.status, await resp.json()

        status, first = await open_("step_0/t-0")
        assert status == 201
        status, error = await open_("step_0/../step_0/t-0")  # the same folder spelled otherwise
        assert status == 409 and error["error"]["param"] == "trial_dir"
        await proxy.close_session(first["session_id"])
        assert (await open_("step_0/t-0"))[0] == 409  # archived by this proxy
        (archive / "earlier").mkdir()
        (archive / "earlier" / TRAJECTORY).write_text("{}")
        assert (await open_("earlier"))[0] == 409  # archived by an earlier proxy on this folder
    assert proxy.sessions == {}
    assert read_archive(archive / "step_0" / "t-0")[0]["session_id"] == first["session_id"]


async def test_a_session_default_folder_cannot_be_claimed_by_another(scripted, serve):
    proxy = await serve(scripted(["x"]))
    info = proxy.open_session()
    async with aiohttp.ClientSession() as http:
        body = {"trial_dir": info.session_id}  # <archive_dir>/<session id>: the first session's folder
        async with http.post(proxy.base_url + "/admin/sessions", json=body, headers=ADMIN) as resp:
            assert resp.status == 409
    assert list(proxy.sessions) == [info.session_id]


async def test_in_process_reuse_of_a_trial_dir_is_refused_and_a_fresh_one_is_unaffected(
    scripted, serve, tmp_path
):
    proxy = await serve(scripted(["One.", "Two."]))
    first = proxy.open_session("calc", "calc-0", trial_dir=tmp_path / "trial" / "attempt_0")
    with pytest.raises(TrialDirInUse, match="attempt_0"):
        proxy.open_session("calc", "calc-0", trial_dir=tmp_path / "trial" / "attempt_0")
    # A retry of the trial opens its own attempt folder, as the rollout does (rollout/trial.py).
    retry = proxy.open_session("calc", "calc-0", trial_dir=tmp_path / "trial" / "attempt_1")
    for info, text in ((first, "One."), (retry, "Two.")):
        client = openai.AsyncOpenAI(base_url=info.openai_base_url, api_key="x")
        r = await client.chat.completions.create(model="p", messages=[USER])
        assert r.choices[0].message.content == text
    await proxy.close_session(first.session_id)
    closed = await proxy.close_session(retry.session_id)
    assert closed.trial_dir == tmp_path / "trial" / "attempt_1"
    with pytest.raises(TrialDirInUse):
        proxy.open_session("calc", "calc-0", trial_dir=tmp_path / "trial" / "attempt_1")
    assert read_archive(tmp_path / "trial" / "attempt_0")[0]["session_id"] == first.session_id


def test_the_text_scan_gives_up_on_a_body_with_too_many_tokens_before_its_deep_part():
    # Ten million commas ahead of the nesting: scanning them all in Python would stall the event loop.
    text = b'{"messages": [' + b"1," * 10_000_000 + b"[" * 2000
    assert deepest_field_in_text(text, 64) == "body"
    assert deepest_field_in_text(text[:40] + b"[" * 2000, 64).startswith("messages[")
