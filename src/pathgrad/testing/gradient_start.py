"""Where a gradient check starts (`pathgrad check-env --start`), and what its failure means.

A robot whose dynamics switch (a joint limit's spring at the limit, a contact at touch)
fails a finite-difference check that starts on a switch, though its gradients are right
on either side. ``--start`` chooses where the check starts: ``reset`` (the env's own
reset), ``settled`` (after 100 steps of zero action: resting on its limits and the
ground, sustained rather than switching), ``smooth`` (the env's ``smooth_start_state``:
every limit some distance inside, lifted off the ground, no forced reset: the dynamics'
own gradients). A failed check says which switches are near and what to try.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["SETTLE_STEPS", "STARTS", "first_switch", "gradient_failure_hint", "gradient_start"]

SETTLE_STEPS = 100
STARTS = {
    "reset": "the env's reset (default)",
    "settled": f"after {SETTLE_STEPS} steps of zero action (fewer in shorter episodes)",
    "smooth": "limits some way inside, off the ground, no forced reset (Newton robots)",
}


def _reset_state(env: Any, seed: int) -> dict[str, torch.Tensor]:
    env.reset(seed=seed)
    return {key: value.detach().clone() for key, value in env.state.items()}


def gradient_start(env: Any, start: str, seed: int) -> dict[str, Any]:
    """``check_env``'s ``gradient_options`` for ``start``.

    Raises:
        ValueError: If the env cannot start there (no state, no ``smooth_start_state``).
    """
    if start == "reset":
        return {}
    if not hasattr(env, "state"):
        raise ValueError(f"--start {start}: the env has no state to start from.")
    if start == "settled":
        env.reset(seed=seed)
        zero = torch.zeros(env.num_envs, env.action_dim, dtype=env.dtype, device=env.device)
        steps = SETTLE_STEPS
        if isinstance(getattr(env, "max_episode_steps", None), int):  # not into a fresh reset
            steps = max(1, min(steps, env.max_episode_steps - 1))
        with torch.no_grad():
            for _ in range(steps):
                env.step(zero)
        return {"initial_state": {k: v.detach().clone() for k, v in env.state.items()}}
    if not hasattr(env, "smooth_start_state"):
        raise ValueError(
            f"--start smooth: {type(env).__name__} has no smooth_start_state(state); "
            "Newton robots have one, other envs can define it."
        )
    return {
        "initial_state": env.smooth_start_state(_reset_state(env, seed)),
        "reset_at_step": None,
    }


def first_switch(
    env: Any, state: dict[str, torch.Tensor], num_steps: int, seed: int, action_scale: float
) -> tuple[int, list[str]] | None:
    """The first step of the gradient check's chain (its seeded actions from ``state``)
    after which some row is past a limit or touching the ground, and what it reaches."""
    from pathgrad.testing.gradients import _actions

    actions = _actions(env, num_steps, seed, action_scale).detach()
    env.state = {key: value.detach().clone() for key, value in state.items()}
    with torch.no_grad():
        for step in range(num_steps):
            env.step(actions[step])
            reached = env.switches_near(env.state, within=0.0)
            if reached:
                return step, reached
    return None


def gradient_failure_hint(
    env: Any, start: str, seed: int, num_steps: int = 5, action_scale: float = 0.5
) -> str:
    """What a failed gradient check of a switching robot means, and what to try."""
    if not hasattr(env, "switches_near"):
        return ""
    state = _reset_state(env, seed) if start == "reset" else gradient_start(env, start, seed)[
        "initial_state"]  # fmt: skip
    near = env.switches_near(state)
    switch = first_switch(env, state, num_steps, seed, action_scale)
    if near:
        where = f"the check starts where the dynamics switch: {'; '.join(near)}"
    elif switch is not None:
        step, reached = switch
        before = f"--steps {step} checks the chain before it, " if step else ""
        where = (f"the check's chain reaches a switch at step {step}: {'; '.join(reached)}; "
                 f"{before}a smaller --action-scale moves less")  # fmt: skip
    elif start == "smooth":
        return (
            "  why: the check started away from every limit and off the ground and its "
            "chain reaches none (bodies colliding with each other are not watched): a "
            "self-contact or a gradient error. Compare with the env's contacts off, and "
            "report it if it stays."
        )
    else:
        where = "no limit or ground contact is near its start or reached by its chain"
    return (
        f"  why: {where}. A joint limit's spring acts from the limit on and a contact's from "
        "touch: central differences across such a point disagree with the analytic Jacobian, "
        "which is right on either side"
        + (
            ""
            if start == "smooth"
            else ". Try --start smooth (every limit 0.1 inside, off "
            "the ground: the dynamics' own gradients)"
        )  # fmt: skip
        + ("" if start != "reset" else " or --start settled (resting on limits and ground)")
        + "."
    )
