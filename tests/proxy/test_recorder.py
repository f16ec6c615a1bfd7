"""The recorder: incremental prompts equal a one-shot render, verbatim branches, rewrites, masks and
routing."""

import json

import numpy as np
import pytest
from scripted_engine import BASH_TOOL, ScriptedEngine, routing_rows

from legorl_jax.engine.base import SamplingParams
from legorl_jax.proxy.openai_api import parse_messages
from legorl_jax.proxy.recorder import Recorder, Renderer
from legorl_jax.proxy.toolcalls import get_parser, parse_output

SYSTEM = {"role": "system", "content": "You fix bugs."}
USER = {"role": "user", "content": "add() in calc.py subtracts; fix it."}


async def turn(
    rec: Recorder, engine: ScriptedEngine, messages, tools, *, kind="main", parser="qwen3", recompute=None
):
    """One proxy turn on the recorder: plan, generate, parse, commit. Returns (plan, generation, reply)."""
    plan = rec.plan(messages, tools, kind=kind)
    gen = await engine.generate(
        list(plan.prompt_ids),
        SamplingParams(max_new_tokens=200),
        return_routed_experts=True,
        routed_experts_start_len=plan.routing_start,
    )
    ids = gen.output_ids.tolist()
    body = ids[:-1] if gen.finish_reason == "stop" else ids
    parsed = parse_output(get_parser(parser), engine.tokenizer.decode(body), tools)
    reply = {"role": "assistant", "content": parsed.content}
    if parsed.reasoning:
        reply["reasoning_content"] = parsed.reasoning
    if parsed.calls:
        reply["tool_calls"] = [
            {
                "id": f"call_{len(rec.branches)}_{i}",
                "type": "function",
                "function": {"name": c.name, "arguments": json.loads(c.arguments)},
            }
            for i, c in enumerate(parsed.calls)
        ]
    rec.commit(plan, gen, reply, turn=0, recomputed=recompute)
    return plan, gen, reply


def resent(reply):
    """The reply as a harness sends it back (arguments re-serialised as a JSON string, reasoning dropped), as
    the OpenAI surface hands it to the recorder."""
    out = {"role": "assistant", "content": reply["content"] or None}
    if "tool_calls" in reply:
        out["tool_calls"] = [
            {
                **c,
                "function": {**c["function"], "arguments": json.dumps(c["function"]["arguments"], indent=1)},
            }
            for c in reply["tool_calls"]
        ]
    return parse_messages([out])[0]


CALL = '<tool_call>\n{"name": "bash", "arguments": {"command": "CMD"}}\n</tool_call>'


@pytest.mark.parametrize("template", ["tiny", "coder"])
async def test_incremental_prompt_equals_a_one_shot_render_over_a_tool_loop(
    tokenizer, coder_tokenizer, template
):
    tok, parser = (tokenizer, "qwen3") if template == "tiny" else (coder_tokenizer, "qwen3_coder")
    coder_call = (
        "<tool_call>\n<function=bash>\n<parameter=command>\nCMD\n</parameter>\n</function>\n</tool_call>"
    )
    call = CALL if template == "tiny" else coder_call
    replies = [
        "<think>\nLook first.\n</think>\n\nLet me look.\n" + call.replace("CMD", "cat calc.py"),
        "<think>\nIt subtracts.\n</think>\n\n" + call.replace("CMD", "sed -i s/-/+/ calc.py"),
        "Fixed: add() now adds.",
    ]
    engine = ScriptedEngine(tok, replies)
    rec = Recorder(Renderer(tok))
    sent = [SYSTEM, USER]  # what the harness sends: arguments re-serialised, reasoning dropped
    returned = [SYSTEM, USER]  # the same conversation with the replies as the proxy returned them
    tools = [BASH_TOOL]
    for i in range(3):
        plan, gen, reply = await turn(rec, engine, sent, tools, parser=parser)
        assert list(plan.prompt_ids) == tok.apply_chat_template(
            returned, tools=tools, add_generation_prompt=True
        ), i
        assert plan.branch == (None if i == 0 else 0)
        sent, returned = [*sent, resent(reply)], [*returned, reply]
        if i < 2:
            result = {"role": "tool", "tool_call_id": reply["tool_calls"][0]["id"], "content": f"output {i}"}
            sent, returned = [*sent, result], [*returned, result]
    # The whole branch is the one-shot render of the finished conversation (its closing newline aside).
    full = tok.apply_chat_template(returned, tools=tools)
    assert rec.branches[0].ids.tolist() == full[:-1]
    assert len(rec.branches) == 1


async def test_a_new_user_message_after_reasoning_feeds_the_verbatim_branch(tokenizer):
    engine = ScriptedEngine(tokenizer, ["<think>\nSubtraction bug.\n</think>\n\nDone.", "ok"])
    rec = Recorder(Renderer(tokenizer))
    _, gen, reply = await turn(rec, engine, [SYSTEM, USER], None)
    branch_ids = list(rec.branches[0].ids)
    follow_up = {"role": "user", "content": "Also check sub()."}
    messages = [SYSTEM, USER, resent(reply), follow_up]
    plan = rec.plan(messages, None, kind="main")
    assert plan.branch == 0
    one_shot = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    assert list(plan.prompt_ids) != one_shot  # the template drops the earlier <think> block ...
    assert list(plan.prompt_ids[: len(branch_ids)]) == branch_ids  # ... the engine is fed what was sampled
    think = tokenizer.encode("<think>")
    assert think[0] in plan.prompt_ids and think[0] not in one_shot
    tail = tokenizer.encode("\n<|im_start|>user\nAlso check sub().<|im_end|>\n<|im_start|>assistant\n")
    assert list(plan.prompt_ids[len(branch_ids) :]) == tail


async def test_end_of_turn_tokens_after_a_sampled_stop_are_context(tokenizer):
    engine = ScriptedEngine(tokenizer, [CALL.replace("CMD", "ls"), "done"])
    rec = Recorder(Renderer(tokenizer))
    _, gen1, reply = await turn(rec, engine, [SYSTEM, USER], [BASH_TOOL])
    end = len(rec.branches[0].ids)
    messages = [
        SYSTEM,
        USER,
        resent(reply),
        {"role": "tool", "tool_call_id": reply["tool_calls"][0]["id"], "content": "x"},
    ]
    await turn(rec, engine, messages, [BASH_TOOL])
    b = rec.branches[0]
    newline = tokenizer.encode("\n")[0]
    assert b.ids[end - 1] == engine.eos and b.mask[end - 1] == 1  # the sampled stop token is trained
    assert b.ids[end] == newline and b.mask[end] == 0  # the template's newline after it is context
    sampled = np.flatnonzero(np.asarray(b.mask))
    assert len(sampled) == len(gen1.output_ids) + 2  # "done" + <|im_end|>


async def test_a_reply_cut_by_length_gets_the_template_end_of_turn_as_context(tokenizer):
    engine = ScriptedEngine(tokenizer, ["a long reply that will not fit " * 4, "ok"])
    rec = Recorder(Renderer(tokenizer))
    plan = rec.plan([SYSTEM, USER], None, kind="main")
    gen = await engine.generate(list(plan.prompt_ids), SamplingParams(max_new_tokens=5))
    assert gen.finish_reason == "length"
    reply = {"role": "assistant", "content": tokenizer.decode(gen.output_ids)}
    rec.commit(plan, gen, reply, turn=0)
    assert not rec.branches[0].closed
    before = list(rec.branches[0].ids)
    plan2 = rec.plan([SYSTEM, USER, reply, {"role": "user", "content": "go on"}], None, kind="main")
    assert plan2.branch == 0
    added = list(plan2.prompt_ids[len(before) :])
    assert added == tokenizer.encode("<|im_end|>\n<|im_start|>user\ngo on<|im_end|>\n<|im_start|>assistant\n")


async def test_a_rewritten_history_opens_a_branch_that_masks_the_shared_prefix(tokenizer):
    engine = ScriptedEngine(
        tokenizer, [CALL.replace("CMD", "ls"), CALL.replace("CMD", "cat calc.py"), "compacted answer"]
    )
    rec = Recorder(Renderer(tokenizer))
    _, _, r1 = await turn(rec, engine, [SYSTEM, USER], [BASH_TOOL])
    m2 = [
        SYSTEM,
        USER,
        resent(r1),
        {"role": "tool", "tool_call_id": r1["tool_calls"][0]["id"], "content": "calc.py"},
    ]
    await turn(rec, engine, m2, [BASH_TOOL])
    # The harness compacts: the first tool exchange is replaced by a summary message.
    compacted = [SYSTEM, USER, {"role": "user", "content": "Summary: you listed the files."}]
    plan, gen, _ = await turn(rec, engine, compacted, [BASH_TOOL])
    assert plan.branch is None and plan.parent == 0
    new, old = rec.branches[1], rec.branches[0]
    assert new.opened_by == "rewrite" and len(rec.branches) == 2
    head = tokenizer.apply_chat_template([SYSTEM, USER], tools=[BASH_TOOL])
    assert plan.shared_prefix == len(head) + 1  # the system and user turns, and the next turn's <|im_start|>
    assert new.shared_masked == sum(old.mask[: plan.shared_prefix]) == 0  # the prefix was prompt in both
    mask = np.asarray(new.mask)
    assert mask[: len(plan.prompt_ids)].sum() == 0
    np.testing.assert_array_equal(np.asarray(new.logprobs)[mask == 1], gen.output_logprobs)
    seqs = rec.sequences()
    assert [s.num_sampled for s in seqs] == [int(sum(old.mask)), len(gen.output_ids)]


@pytest.mark.parametrize("mode", ["mask", "recompute"])
async def test_replies_an_earlier_branch_sampled_are_masked_or_recomputed_never_a_placeholder(
    tokenizer, mode
):
    reply_text = "I will list the files now."
    engine = ScriptedEngine(tokenizer, [reply_text, "next"])
    rec = Recorder(Renderer(tokenizer), shared_tokens=mode)
    _, gen1, r1 = await turn(rec, engine, [SYSTEM, USER], None)
    # A reminder injected into the system prompt: the same reply now sits in another context.
    messages = [
        {"role": "system", "content": "REMINDER. You fix bugs."},
        USER,
        resent(r1),
        {"role": "user", "content": "go"},
    ]
    plan = rec.plan(messages, None, kind="main")
    assert plan.branch is None
    sampled = gen1.output_ids.tolist()  # the reply and its <|im_end|>
    positions = list(plan.rerendered)
    assert [plan.prompt_ids[p] for p in positions] == sampled
    recomputed = np.asarray(await engine.prompt_logprobs(list(plan.prompt_ids), 1), np.float32)[
        np.asarray(positions) - 1
    ]
    gen = await engine.generate(list(plan.prompt_ids), SamplingParams(max_new_tokens=20))
    branch = rec.commit(
        plan,
        gen,
        {"role": "assistant", "content": "next"},
        turn=1,
        recomputed=recomputed if mode == "recompute" else None,
    )
    mask, lps = np.asarray(branch.mask), np.asarray(branch.logprobs)
    if mode == "recompute":
        assert branch.recomputed == len(sampled) and branch.rerendered_masked == 0
        assert mask[positions].tolist() == [1] * len(sampled)
        np.testing.assert_array_equal(lps[positions], recomputed)
    else:
        assert branch.rerendered_masked == len(sampled) and branch.recomputed == 0
        assert mask[positions].tolist() == [0] * len(sampled)
    assert np.all(lps[mask == 1] < 0)  # every trained token has a real log-prob


async def test_recompute_mode_without_the_recomputed_log_probs_is_refused(tokenizer):
    engine = ScriptedEngine(tokenizer, ["I will list the files now.", "x"])
    rec = Recorder(Renderer(tokenizer), shared_tokens="recompute")
    _, _, r1 = await turn(rec, engine, [SYSTEM, USER], None)
    plan = rec.plan(
        [{"role": "system", "content": "Other."}, USER, resent(r1), {"role": "user", "content": "go"}],
        None,
        kind="main",
    )
    gen = await engine.generate(list(plan.prompt_ids), SamplingParams(max_new_tokens=4))
    with pytest.raises(ValueError, match="recomputed must hold"):
        rec.commit(plan, gen, {"role": "assistant", "content": "x"}, turn=1)


async def test_changed_tools_open_a_new_branch(tokenizer):
    engine = ScriptedEngine(tokenizer, ["a", "b"])
    rec = Recorder(Renderer(tokenizer))
    _, _, r1 = await turn(rec, engine, [SYSTEM, USER], [BASH_TOOL])
    other = {
        "type": "function",
        "function": {"name": "view", "parameters": {"type": "object", "properties": {}}},
    }
    plan, _, _ = await turn(
        rec, engine, [SYSTEM, USER, resent(r1), {"role": "user", "content": "?"}], [BASH_TOOL, other]
    )
    assert plan.branch is None and len(rec.branches) == 2


async def test_routing_rows_cover_every_input_position_but_the_last(tokenizer):
    engine = ScriptedEngine(tokenizer, [CALL.replace("CMD", "ls"), CALL.replace("CMD", "pwd"), "done"])
    rec = Recorder(Renderer(tokenizer))
    messages = [SYSTEM, USER]
    for i in range(3):
        before = len(rec.branches[0].ids) if rec.branches else 0
        plan, _, reply = await turn(rec, engine, messages, [BASH_TOOL])
        # Routing is asked from the previous turn's last sampled token: the first input never forwarded.
        assert plan.routing_start == (0 if i == 0 else before - 1)
        if "tool_calls" in reply:
            messages = [
                *messages,
                resent(reply),
                {"role": "tool", "tool_call_id": reply["tool_calls"][0]["id"], "content": "ok"},
            ]
    seq = rec.sequences()[0]
    routed = seq.routed_experts
    assert routed.shape == (len(seq.token_ids), 2, 2)
    assert np.all(routed[:-1] >= 0) and np.all(routed[-1] == -1)
    np.testing.assert_array_equal(routed[:-1], routing_rows(seq.token_ids.tolist(), 0).astype(np.int16))


async def test_a_template_that_numbers_turns_turns_the_fast_render_off_and_stays_exact(tokenizer):
    import copy

    tok = copy.copy(tokenizer)
    tok.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m.role }} #{{ loop.index }}\n{{ m.content }}<|im_end|>\n{% "
        "endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    engine = ScriptedEngine(tok, ["one", "two", "three"])
    renderer = Renderer(tok)
    rec = Recorder(renderer)
    sent = [SYSTEM, USER]
    for i in range(3):
        before = list(rec.branches[0].ids) if rec.branches else []
        plan, _, reply = await turn(rec, engine, sent, None)
        assert list(plan.prompt_ids[: len(before)]) == before
        if i:  # the new turn numbered as the whole history numbers it, not as a stand-in history would
            tail = f"\n<|im_start|>user #{len(sent)}\nnext {i - 1}<|im_end|>\n<|im_start|>assistant\n"
            assert list(plan.prompt_ids[len(before) :]) == tok.encode(tail), i
        sent = [*sent, reply, {"role": "user", "content": f"next {i}"}]
    assert renderer.fast_mismatches == 1 and not renderer.fast


async def test_the_fast_render_is_checked_and_kept_on_the_chatml_template(tokenizer):
    engine = ScriptedEngine(tokenizer, [f"reply {i}" for i in range(6)])
    renderer = Renderer(tokenizer)
    rec = Recorder(renderer)
    sent = [SYSTEM, USER]
    for i in range(6):
        plan, _, reply = await turn(rec, engine, sent, [BASH_TOOL])
        assert list(plan.prompt_ids) == tokenizer.apply_chat_template(
            sent, tools=[BASH_TOOL], add_generation_prompt=True
        )
        sent = [*sent, reply, {"role": "user", "content": f"next {i}"}]
    assert renderer.fast and renderer.fast_mismatches == 0
    assert (
        renderer.fast_renders == 5 and renderer.verified_renders == 1
    )  # the one shape of turn (a user message) checked once
    sent = [*sent[:-1], {"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    plan, _, _ = await turn(
        rec, engine, sent, [BASH_TOOL]
    )  # a new shape (two user messages) is checked again
    assert list(plan.prompt_ids) == tokenizer.apply_chat_template(
        sent, tools=[BASH_TOOL], add_generation_prompt=True
    )
    assert renderer.verified_renders == 2
