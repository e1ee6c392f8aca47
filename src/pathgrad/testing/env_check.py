"""``check_env``: a whole env checked as Gymnasium's and SB3's checkers do, gradients included.

The checks, in order (each lists all its failures, one line each; one failing
does not stop the others):

- ``contract``: attributes, return types, shapes, dtypes and device of
  observation, reward, done flags (bool), ``final_observation``, ``metrics``
  and state entries, at reset and at every step the other checks take.
- ``reproducibility``: two runs from the same seeded reset and actions are equal.
- ``state_dict``: a saved state, restored after the env moved on, continues exactly.
- ``detach_state``: it cuts the graph and keeps the episode going.
- ``rollout``: random actions over a few episodes stay finite.
- ``gradients``: :func:`~pathgrad.testing.check_env_gradients` over a chain through a reset.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from torch.autograd.gradcheck import GradcheckError

from pathgrad.core.autograd_faults import (
    inplace_write_message,
    is_inplace_error,
    locate_inplace_write,
)
from pathgrad.core.crash_report import describe
from pathgrad.core.env_contract import (
    Problem,
    action_dim,
    env_problems,
    observation_dim,
    reset_problems,
    step_problems,
)
from pathgrad.envs.base import BatchedDifferentiableEnv
from pathgrad.testing.behaviour import (
    Skipped,
    check_detach_state,
    check_reproducibility,
    check_rollout,
    check_state_dict,
    random_actions,
)
from pathgrad.testing.gradients import check_gradients

__all__ = ["CHECKS", "CheckOutcome", "EnvCheckResult", "check_env"]

CHECKS = ("contract", "reproducibility", "state_dict", "detach_state", "rollout", "gradients")


@dataclasses.dataclass(frozen=True)
class CheckOutcome:
    """One check: its failures (one line each), or what it checked, or why it was skipped."""

    name: str
    failures: tuple[str, ...] = ()
    note: str = ""
    skipped: bool = False

    @property
    def passed(self) -> bool:
        """No failure (a skipped check passes)."""
        return not self.failures

    def lines(self) -> list[str]:
        """``"name: ok (note)"``, ``"name: skipped (why)"`` or one ``"name: FAILED: ..."`` each."""
        if self.failures:
            return [f"{self.name}: FAILED: {failure}" for failure in self.failures]
        status = "skipped" if self.skipped else "ok"
        return [f"{self.name}: {status}" + (f" ({self.note})" if self.note else "")]


@dataclasses.dataclass(frozen=True)
class EnvCheckResult:
    """What :func:`check_env` found; true when every check passed."""

    checks: tuple[CheckOutcome, ...]

    @property
    def passed(self) -> bool:
        """Whether every check passed."""
        return all(check.passed for check in self.checks)

    @property
    def failures(self) -> list[str]:
        """Every failure, as ``"check: reason"``."""
        return [f"{check.name}: {failure}" for check in self.checks for failure in check.failures]

    def __getitem__(self, name: str) -> CheckOutcome:
        for check in self.checks:
            if check.name == name:
                return check
        raise KeyError(name)

    def __iter__(self) -> Iterator[CheckOutcome]:
        return iter(self.checks)

    def __bool__(self) -> bool:
        return self.passed

    def __str__(self) -> str:
        return "\n".join(line for check in self.checks for line in check.lines())


def check_env(
    env: Any,
    *,
    seed: int = 0,
    num_steps: int = 5,
    rollout_episodes: int = 2,
    max_rollout_steps: int = 1000,
    gradients: bool = True,
    reference_env: Any = None,
    gradient_options: Mapping[str, Any] | None = None,
) -> EnvCheckResult:
    """Check an env against the contract, its behaviour over steps, and its gradients.

    Small envs keep it fast: build the env with a few rows (2 to 4). The env
    is stepped, reset and restored; it is left reset with ``seed``.

    Args:
        env: Any :class:`~pathgrad.env.DifferentiableVecEnv`; ``state_dict`` is
            checked where it has one, and envs not built on
            ``BatchedDifferentiableEnv`` have their gradients checked in the actions only.
        seed: Seed of the resets and the random actions.
        num_steps: Steps of the reproducibility, ``state_dict``, ``detach_state``
            and gradient checks.
        rollout_episodes: Length of the random rollout, in episodes of
            ``max_episode_steps`` (at most ``max_rollout_steps`` steps).
        max_rollout_steps: Cap on the rollout's steps.
        gradients: Run the gradient check (the slowest).
        reference_env: float64 twin of a float32 env, for the gradient check.
        gradient_options: More keyword arguments of ``check_env_gradients``
            (``initial_state``, ``action_scale``, ``rtol``...).

    Returns:
        The outcome of every check (``result.passed``, ``result.failures``,
        ``str(result)`` one line per check).

    Raises:
        ValueError: If ``num_steps``, ``rollout_episodes`` or ``max_rollout_steps``
            is not positive.
    """
    for name, value in (
        ("num_steps", num_steps),
        ("rollout_episodes", rollout_episodes),
        ("max_rollout_steps", max_rollout_steps),
    ):
        if int(value) < 1:
            raise ValueError(f"{name} must be positive, got {value}.")
    contract: list[tuple[Problem, str]] = [(problem, "") for problem in env_problems(env)]
    runnable = action_dim(env) is not None and observation_dim(env) is not None
    runnable = runnable and not any(p.member in ("num_envs", "device") for p, _ in contract)
    outcomes: dict[str, CheckOutcome] = {}

    def run(name: str, check: Callable[[], tuple[list[str], str]]) -> None:
        if not runnable:
            outcomes[name] = _skipped(name, "needs num_envs, device and 1-D Box spaces")
            return
        try:
            failures, note = check()
        except Skipped as reason:
            outcomes[name] = _skipped(name, str(reason))
            return
        except Exception as error:  # noqa: BLE001 - whatever the env raises is a failure
            failures, note = [f"raised {describe(error)}"], ""
        outcomes[name] = CheckOutcome(name, tuple(failures), note)

    run("contract", lambda: _check_contract(env, seed, num_steps, contract))
    run("reproducibility", lambda: check_reproducibility(env, seed, num_steps))
    reproducible = outcomes["reproducibility"].passed
    run("state_dict", lambda: check_state_dict(env, seed, num_steps))
    run("detach_state", lambda: check_detach_state(env, seed, num_steps, compare=reproducible))
    steps = getattr(env, "max_episode_steps", None)
    length = max_rollout_steps if not isinstance(steps, int) else steps * rollout_episodes
    run("rollout", lambda: check_rollout(env, seed, min(length, max_rollout_steps), contract))
    if runnable:  # the rollout adds the problems of its steps to the contract's
        contract_failures = _unique(contract) + list(outcomes["contract"].failures)
        outcomes["contract"] = dataclasses.replace(
            outcomes["contract"], failures=tuple(dict.fromkeys(contract_failures))
        )
    else:
        outcomes["contract"] = CheckOutcome("contract", tuple(_unique(contract)))
    options = {"seed": seed, **(gradient_options or {})}
    if not gradients:
        outcomes["gradients"] = _skipped("gradients", "not asked for")
    elif not reproducible and not isinstance(env, BatchedDifferentiableEnv):
        outcomes["gradients"] = _skipped("gradients", "a replayed chain needs a reproducible env")
    else:
        run("gradients", lambda: _check_gradients(env, num_steps, reference_env, options))
    try:
        env.reset(seed=seed)
    except Exception:  # noqa: BLE001, S110 - a failing reset is already reported
        pass
    return EnvCheckResult(tuple(outcomes[name] for name in CHECKS))


def _check_contract(
    env: Any, seed: int, num_steps: int, contract: list[tuple[Problem, str]]
) -> tuple[list[str], str]:
    """Reset and a few steps with actions that require grad; problems go to ``contract``."""
    contract += [(p, f"reset(seed={seed})") for p in reset_problems(env, env.reset(seed=seed))]
    for step, action in enumerate(random_actions(env, num_steps, seed)):
        problems = step_problems(env, env.step(action.requires_grad_()))
        contract += [(problem, f"step {step}") for problem in problems]
        if any(problem.member in ("step()", "info") for problem in problems):
            break
    return [], f"reset and {num_steps} steps, then every step of the rollout"


def _check_gradients(
    env: Any, num_steps: int, reference_env: Any, options: dict[str, Any]
) -> tuple[list[str], str]:
    def check() -> str:
        return check_gradients(
            env, num_steps, reference_env=reference_env, contract=False, **options
        )

    try:
        source = check()
    except GradcheckError as error:  # the checker's own failures: their first line says it
        return [_first_line(error)], ""
    except RuntimeError as error:
        if not is_inplace_error(error):
            raise
        return [inplace_write_message(locate_inplace_write(check))], ""
    if not source:
        return ["gradcheck returned False"], ""
    if isinstance(env, BatchedDifferentiableEnv):
        through = " through an auto-reset" if options.get("reset_at_step", 2) is not None else ""
        return [], f"{num_steps} steps{through}, against {source}"
    return [], f"{num_steps} steps in the actions, replayed from reset, against {source}"


def _unique(contract: list[tuple[Problem, str]]) -> list[str]:
    """The first problem of each member, with where it was seen."""
    seen: dict[str, str] = {}
    for problem, where in contract:
        seen.setdefault(problem.member, f"{problem} ({where})" if where else str(problem))
    return list(seen.values())


def _skipped(name: str, reason: str) -> CheckOutcome:
    return CheckOutcome(name, note=reason, skipped=True)


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]
