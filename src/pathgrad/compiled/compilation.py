"""What ``trainer.torch_compile`` compiles: the whole update, rollout chunks, or step and policy."""

from __future__ import annotations

from typing import Any

from pathgrad.compiled.blockers import compiled_update_blockers
from pathgrad.compiled.critic_update import CompiledCriticUpdate
from pathgrad.compiled.rollout import CompiledRolloutChunks, supports_fused_steps
from pathgrad.compiled.update import CompiledAPGUpdate
from pathgrad.core.episodes import EpisodeTracker

__all__ = ["CompiledUpdate", "compile_training"]

CompiledUpdate = CompiledAPGUpdate | CompiledCriticUpdate


def compile_training(
    cfg: Any, env: Any, policy: Any, algorithm: Any, collector: Any, episodes: EpisodeTracker
) -> tuple[str, str, CompiledUpdate | None]:
    """Compile as much of training as ``cfg.compile_scope`` allows.

    Returns:
        The scope compiled (``update`` or ``rollout``), why (what a user reads
        when the update could not be compiled), and the compiled update if any.

    Raises:
        ValueError: If nothing can be compiled (an env or policy without the
            pure step functions or ``compile_step``/``compile_networks``).
    """
    reasons = compiled_update_blockers(algorithm, env, policy, collector, cfg.rollout_mode)
    if cfg.compile_scope == "update" and not reasons:
        kind = {"apg": CompiledAPGUpdate, "critic": CompiledCriticUpdate}[
            algorithm.compiled_update
        ]
        update = kind(
            env,
            policy,
            algorithm,
            collector,
            episodes,
            segment_length=cfg.segment_length,
            chunk_steps=cfg.compile_chunk_steps,
            deterministic=cfg.deterministic_actions,
        )
        return "update", f"{cfg.compile_chunk_steps}-step chunks", update
    reason = (
        "trainer.compile_scope is 'rollout'"
        if cfg.compile_scope == "rollout"
        else "the update cannot be compiled: " + "; ".join(reasons)
    )
    info_keys = tuple(algorithm.step_info_keys)
    if info_keys:  # compiled chunks carry only final_observation and metrics
        reason += f" (the algorithm reads info{list(info_keys)}, which rollout chunks drop)"
    if supports_fused_steps(env, policy) and not collector.needs_step_hooks and not info_keys:
        collector.use_compiled_chunks(
            CompiledRolloutChunks(
                collector.env,
                collector.policy,
                cfg.compile_chunk_steps,
                observation_normalizer=collector.observation_normalizer,
                action_bounds=collector.action_bounds,
            )
        )
        return "rollout", reason, None
    for owner, method in ((env, "compile_step"), (policy, "compile_networks")):
        if not callable(getattr(owner, method, None)):
            raise ValueError(f"torch_compile needs {type(owner).__name__}.{method}().")
    env.compile_step()
    policy.compile_networks()
    return "rollout", reason + " (env step and policy compiled separately)", None
