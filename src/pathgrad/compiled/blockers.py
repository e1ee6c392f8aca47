"""Why an update cannot be compiled whole: every reason, for the trainer to print."""

from __future__ import annotations

from typing import Any

from pathgrad.algo.ahac import AHAC, CONTACT_INFO_KEYS
from pathgrad.algo.apg import APG
from pathgrad.algo.sapo import SAPO
from pathgrad.algo.shac import SHAC
from pathgrad.compiled.adam import optimizer_blockers
from pathgrad.compiled.rollout import supports_fused_steps

__all__ = ["COMPILED_ALGORITHMS", "compiled_update_blockers"]

# what pathgrad.compiled.update (APG) and pathgrad.compiled.critic_update (the rest) compile
COMPILED_ALGORITHMS = (APG, SHAC, SAPO)


def compiled_update_blockers(
    algorithm: Any, env: Any, policy: Any, collector: Any, rollout_mode: str
) -> list[str]:
    """Why an update cannot be compiled whole (empty: it can)."""
    reasons = []
    kind = type(algorithm)
    if kind is AHAC:
        reasons.append(
            f"AHAC reads info{list(CONTACT_INFO_KEYS)} of every step, which only Newton envs "
            "report, and torch cannot compile a Newton step"
        )
    elif kind not in COMPILED_ALGORITHMS:
        reasons.append(f"the algorithm is {kind.__name__}, not APG, SHAC or SAPO")
    if rollout_mode != "segmented":
        reasons.append(f"rollout_mode is '{rollout_mode}', not 'segmented'")
    if not supports_fused_steps(env, policy):
        reasons.append("the env or policy lacks transition()/action_from_noise()")
    if collector.needs_step_hooks:
        reasons.append(
            "per-step gradient hooks are on (action adjoint clipping or "
            "health record, state-gradient decay)"
        )
    reasons += optimizer_blockers(getattr(algorithm, "optimizer", None))
    if kind in COMPILED_ALGORITHMS and isinstance(algorithm, SHAC):
        reasons += optimizer_blockers(algorithm.critic_optimizer, "the critic optimizer")
    return reasons
