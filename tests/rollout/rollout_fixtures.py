"""Constants the rollout tests share (a module of its own: `conftest` names clash across test folders)."""

TASK_IDS = ("autocomplete-casefold-prefix", "basecodec-base58-leading-zeros")
MAX_LEN = 2048
