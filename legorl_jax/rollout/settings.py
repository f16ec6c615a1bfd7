"""How every trial of a run is run, one frozen record: the rollout settings, the harness's step limit and
model name, the agent sandbox's and the verifier's settings.

    trials = TrialSettings.of(config)
    batch = await collect(tasks, group_size=..., harness=..., proxy=..., trials=trials, step=3)
    trajectory = await run_trial(task, ..., trials=TrialSettings(rollout=RolloutConfig(retries=0)))
    eval_trials = trials.for_validation()        # archived under <experiment>/validation
"""

from __future__ import annotations

import dataclasses

from legorl_jax.config import Config, RolloutConfig, SandboxConfig, VerifierConfig


@dataclasses.dataclass(frozen=True)
class TrialSettings:
    """The settings of one run's trials (module docstring). Without a sandbox config a trial gets the
    defaults for its task (`tasks.agent_sandbox.agent_sandbox_spec`); without a verifier config, the
    verifier's defaults."""

    rollout: RolloutConfig = dataclasses.field(default_factory=RolloutConfig)
    step_limit: int = 30
    model: str = "legorl-policy"
    sandbox: SandboxConfig | None = None
    verifier: VerifierConfig | None = None

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
