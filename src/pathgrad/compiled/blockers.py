"""Why an update cannot be compiled whole: every reason, for the trainer to print."""

from __future__ import annotations

from typing import Any

from pathgrad.compiled.adam import optimizer_blockers
from pathgrad.compiled.rollout import supports_fused_steps

__all__ = ["COMPILED_UPDATE_KINDS", "compiled_update_blockers"]

# what an algorithm's ``compiled_update`` may declare: pathgrad.compiled.update compiles
# "apg" (the actor's update), pathgrad.compiled.critic_update "critic" (actor and critics)
COMPILED_UPDATE_KINDS = ("apg", "critic")


def compiled_update_blockers(
    algorithm: Any, env: Any, policy: Any, collector: Any, rollout_mode: str
) -> list[str]:
    """Why an update cannot be compiled whole (empty: it can)."""
    reasons = []
    kind = getattr(algorithm, "compiled_update", None)
    if kind not in COMPILED_UPDATE_KINDS:
        reasons.append(
            getattr(algorithm, "compile_blocker", None)
            or f"the algorithm is {type(algorithm).__name__}, which declares no compiled_update "
            "(APG, SHAC and SAPO do)"
        )
    if rollout_mode != "segmented":
        reasons.append(f"rollout_mode is '{rollout_mode}', not 'segmented'")
    if not supports_fused_steps(env, policy):
        reasons.append("the env or policy lacks transition()/action_from_noise()")
    if collector.needs_step_hooks:
        reasons.append(
            "per-step gradient hooks are on (action adjoint clipping or "
            "health record, state-gradient decay)"
        )
    optimizers = (
        algorithm.compiled_optimizers()
        if kind in COMPILED_UPDATE_KINDS
        else [(getattr(algorithm, "optimizer", None), "the optimizer")]
    )
    for optimizer, label in optimizers:
        reasons += optimizer_blockers(optimizer, label)
    return reasons
