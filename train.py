"""Train a coding agent with RL through its own harness: `python train.py [overrides]`.

    python train.py                          # tiny MoE, embedded engine, built-in tasks and harness, GSPO
    python train.py experiment=demo          # what `make demo` runs (warm start, then RL)
    python train.py +harness=mini_swe_agent  # another harness (+harness=swe_agent, ...)
    python train.py engine=sglang engine.url=http://127.0.0.1:30000 model.path=/models/Qwen3-8B
    python train.py -m algo=gspo,cispo train.learning_rate=1e-6,3e-6    # a sweep: one Aim run per job
    python train.py experiment=demo rollout.experiment=NAME resume=true  # continue a run from its checkpoint
    aim up --repo runs/aim                   # browse and compare the runs

The config is `conf/` (schemas in legorl_jax/config.py). Each job writes
`<rollout.runs_dir>/<rollout.experiment>/` (a sweep's jobs get `-<job number>` appended) and ends with a
per-step table, `summary.md` and `curves.png`.
"""

from __future__ import annotations

import asyncio
import logging
import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from legorl_jax.config import Config, register_configs

register_configs()
log = logging.getLogger("train")


def _job(cfg: DictConfig) -> tuple[Config, str]:
    """The validated `Config` of this job and its name (its overrides); a sweep job gets its own folder."""
    hc = HydraConfig.get()
    job = ""
    if hc.mode == RunMode.MULTIRUN:
        # The job's name: its values of the swept keys (those given as a,b,... on the command line).
        swept = {
            a.split("=", 1)[0].lstrip("+~") for a in sys.argv[1:] if "=" in a and "," in a.split("=", 1)[1]
        }
        job = " ".join(o for o in hc.overrides.task if o.split("=", 1)[0].lstrip("+~") in swept)
        if cfg.tracking.experiment is None:
            cfg.tracking.experiment = cfg.rollout.experiment
        cfg.rollout.experiment = f"{cfg.rollout.experiment}-{hc.job.num}"
    config = OmegaConf.to_object(cfg)
    assert isinstance(config, Config)
    return config, job


@hydra.main(config_path="conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    from legorl_jax.monitor.report import run_summary
    from legorl_jax.run import train

    for noisy in ("absl", "jax._src.xla_bridge", "aim"):  # orbax's per-save INFO lines, JAX's backend probing
        logging.getLogger(noisy).setLevel(logging.WARNING)
    config, job = _job(cfg)
    summary = asyncio.run(train(config, job=job))
    if summary is None:  # a process other than 0 of a mesh.distributed run: process 0 summarises
        return
    text = run_summary(config, summary)
    (summary.run_dir / "summary.md").write_text(text + "\n")
    print("\n" + text, flush=True)


if __name__ == "__main__":
    sys.exit(main())
