"""How every trial of a run is run, one frozen record: the rollout settings, the harness's step limit and
model name, the agent sandbox's and the verifier's settings.

    trials = TrialSettings.of(config)
    batch = await collect(tasks, group_size=..., config=trials.rollout, step_limit=trials.step_limit, ...)
    eval_trials = trials.for_validation()        # archived under <experiment>/validation
"""

from __future__ import annotations

import dataclasses

from legorl_jax.config import Config, RolloutConfig, SandboxConfig, VerifierConfig


@dataclasses.dataclass(frozen=True)
class TrialSettings:
    """The settings of one run's trials (module docstring)."""

    rollout: RolloutConfig
    step_limit: int
    model: str
    sandbox: SandboxConfig
    verifier: VerifierConfig

    @classmethod
    def of(cls, config: Config) -> TrialSettings:
        return cls(
            rollout=config.rollout,
            step_limit=config.harness.step_limit,
            model=config.harness.model,
            sandbox=config.sandbox,
            verifier=config.verifier,
        )

    def for_validation(self) -> TrialSettings:
        """The same, archived under `<rollout.experiment>/validation`."""
        rollout = dataclasses.replace(self.rollout, experiment=f"{self.rollout.experiment}/validation")
        return dataclasses.replace(self, rollout=rollout)
