"""The harness registry: name -> "module:class", a leaf module (it imports nothing of the package), so the
config (harness.name's check) and `get_harness` read the one list without the config importing an adapter.
Adapters are imported only when chosen (`legorl_jax.harness.get_harness`)."""

HARNESSES = {
    "builtin": "legorl_jax.harness.builtin:BuiltinHarness",
    "mini_swe_agent": "legorl_jax.harness.mini_swe_agent:MiniSweAgentHarness",
    "swe_agent": "legorl_jax.harness.swe_agent:SweAgentHarness",
    "claude_code": "legorl_jax.harness.claude_code:ClaudeCodeHarness",
    "opencode": "legorl_jax.harness.opencode:OpenCodeHarness",
    "terminus_2": "legorl_jax.harness.terminus_2:Terminus2Harness",
    "openhands": "legorl_jax.harness.openhands:OpenHandsHarness",
    "codex": "legorl_jax.harness.codex:CodexHarness",
}
