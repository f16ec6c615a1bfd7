"""Tasks and their tamper-proof verifier (docs/security.md §3, §4).

- `schema`: the `Task` record and `TaskError`; `registry.load_suite(name_or_path, split)` loads the built-in
  suite (`builtin`), SWE-bench / SWE-Gym JSONL files and Harbor task directories.
- `verifier.grade(task, diff)`: grades an agent's diff in a fresh sandbox (protected changes dropped, hidden
  tests added, results cross-checked) → `report.VerifierReport`, or `report.VerifierError` when the
  infrastructure failed.
- `agent_sandbox.prepare_agent_sandbox(task, sandbox)`: strips git history and checks that no hidden test is
  present before a harness works in the sandbox.
- `python -m legorl_jax.tasks list|show|grade|validate` (`cli`).

Importing this package imports nothing else and touches nothing.
"""
