"""The command line of `legorl_jax/model/tiny.py`: a complete, random-init HF model directory.

    python tools/make_tiny_model.py --out runs/tiny-moe            # Qwen3-MoE, seconds
    python tools/make_tiny_model.py --out runs/tiny-dense --dense  # Qwen3 dense

The module is loaded by path, not imported as `legorl_jax.model.tiny`, so that the reference venv of
tools/make_hf_fixtures.py (Python 3.11, without jax) runs it too; its names (`make_tiny_model`,
`TinyModelSpec`, `spec_argv`, ...) are this module's.
"""

from __future__ import annotations

import importlib.util
import pathlib
import sys

_PATH = pathlib.Path(__file__).resolve().parents[1] / "legorl_jax" / "model" / "tiny.py"
_spec = importlib.util.spec_from_file_location("legorl_jax_model_tiny", _PATH)
if _spec is None or _spec.loader is None:
    raise ImportError(f"cannot load {_PATH}")
_tiny = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = _tiny  # dataclasses resolve their module through sys.modules
_spec.loader.exec_module(_tiny)
globals().update({k: v for k, v in vars(_tiny).items() if not k.startswith("__")})

if __name__ == "__main__":
    sys.exit(_tiny.main())
