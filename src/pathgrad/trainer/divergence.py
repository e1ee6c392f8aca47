"""A run that diverges says so: skipped updates named, and a stop after too many in a row.

An update whose loss or gradient is not finite (or whose gradient exceeds
``max_grad_norm_before_clip``) is skipped: the parameters stay as they were.
:class:`SkipWatch` counts skipped updates; the first one of a run is named in
one line (what was not finite, in how many env rows, from which env step: the
update is replayed without gradients from the state it started in, so
updates that are not skipped cost nothing), and after
``max_consecutive_skipped_updates`` in a row training ends with status
``diverged``, keeping the last good parameters.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from pathgrad.core.autograd_faults import locate_nan_gradient

__all__ = ["SkipWatch", "describe_skipped_update"]


class SkipWatch:
    """Counts skipped updates: in all, and in a row.

    Args:
        limit: Consecutive skipped updates that stop the run (0: never).
    """

    def __init__(self, limit: int) -> None:
        self.limit = int(limit)
        self.total = 0
        self.consecutive = 0
        self.reported = False  # the first skip of the run was named

    def record(self, skipped: bool) -> bool:
        """Count one update; returns whether it is the first skip to name."""
        if not skipped:
            self.consecutive = 0
            return False
        self.total += 1
        self.consecutive += 1
        first, self.reported = not self.reported, True
        return first

    @property
    def diverged(self) -> bool:
        """Whether the updates skipped in a row reached the limit."""
        return self.limit > 0 and self.consecutive >= self.limit

    def divergence(self, num_updates: int) -> str:
        """Why a run that :attr:`diverged` after ``num_updates`` stopped."""
        return (
            f"{self.consecutive} updates in a row were skipped (non-finite or excessive "
            f"gradients; {self.total} of {num_updates} in all); the parameters are those of "
            "the last update that was not skipped (trainer.max_consecutive_skipped_updates "
            "sets the limit, 0: none)."
        )

    def all_skipped(self, num_updates: int) -> str | None:
        """The notice of a run whose ``num_updates`` updates were all skipped, else None."""
        if not self.consecutive >= num_updates > 0:
            return None
        which = (
            "the run's one update was"
            if num_updates == 1
            else f"every one of the run's {num_updates} updates was"
        )
        return (
            f"{which} skipped (non-finite or excessive gradients), so the policy is still the "
            "initial one; the first skipped update's warning names the cause."
        )

    def state_dict(self) -> dict[str, Any]:
        return {"total": self.total, "consecutive": self.consecutive, "reported": self.reported}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.total = int(state.get("total", 0))
        self.consecutive = int(state.get("consecutive", 0))
        self.reported = bool(state.get("reported", self.total > 0))


def describe_skipped_update(
    trainer: Any,
    snapshot: Any,
    metrics: dict[str, float],
    steps: int,
    update: Callable[[], Any] | None = None,
) -> str:
    """One line on why update ``trainer.num_updates`` was skipped.

    ``update`` (the update's function) lets a NaN gradient of a finite rollout
    be replayed under anomaly detection to name the user's line it came from.

    The gradient's case comes from the update's metrics; what was not finite
    in the rollout, from replaying its ``steps`` env steps without gradients
    from ``snapshot`` (same parameters, same random draws), then restoring
    the trainer's state. Envs without ``state_dict`` are not replayed.
    """
    title = f"update {trainer.num_updates} was skipped"
    cause = _gradient_cause(trainer, metrics)
    hint = getattr(trainer.env, "instability_hint", None)  # a Newton env: its stiff terms
    stiff = callable(hint) and "not finite" in cause  # not an excessive (finite) gradient

    def line(text: str) -> str:  # the hint is computed only where it is said
        return f"{title}: {text}; {hint()}." if stiff else f"{title}: {text}."

    if snapshot.env is None or steps <= 0:
        return line(cause)
    found, stepped = _replay(trainer, snapshot, steps)
    if found:  # the stiffness hint only where a step turned a finite state non-finite
        return line(f"{found}; {cause}") if stepped else f"{title}: {found}; {cause}."
    if cause != "its policy gradient is not finite":
        return line(cause)
    growth = _growth_clause(trainer)
    if growth:  # a finite rollout whose gradient had been growing: not a stiff step
        return f"{title}: {cause}{growth}."
    if stiff:
        stable = getattr(trainer.env, "steps_are_stable", None)
        if callable(stable) and stable():  # finite, stable steps: the window's gradient grew
            return f"{title}: {cause} though its rollout was finite; {_WINDOW_OVERFLOW}."
        return line(cause)
    cause += " though its rollout was finite"
    where = None
    compiled = getattr(trainer, "compiled_update", None) is not None  # would recompile
    if update is not None and not trainer.data_parallel.active and not compiled:
        where = _locate_nan_gradient(trainer, snapshot, update)
    cause += f"; the first NaN gradient is that of {where}" if where else ""
    return f"{title}: {cause}; {_MASKED_BRANCH}."


_WINDOW_OVERFLOW = (
    "the gradient through the window overflowed: it grows through stiff springs (joint limits, "
    "contacts) step after step even where the steps stay finite (`pathgrad check-env` prints "
    "the env's window gradient norms); bound it with more substeps (twice as many), a shorter "
    "trainer.segment_length or trainer.action_adjoint_max_norm"
)
_GROWN_NORM = 1e6  # a norm before clipping this large says the gradient grows with the window


def _growth_clause(trainer: Any) -> str:
    """Where the applied updates' gradient norms (before clipping) had already exploded:
    that, and the settings that bound it; '' otherwise."""
    norms = [
        entry.get("train/grad_norm")
        for entry in getattr(trainer, "train_history", ())
        if not entry.get("train/skipped_update")
    ]
    finite = [n for n in norms if isinstance(n, (int, float)) and math.isfinite(n)]
    if not finite or max(finite) < _GROWN_NORM:
        return ""
    remedies = [
        "trainer.action_adjoint_max_norm (each env's action adjoint clipped, e.g. 0.01 on "
        "DiffRLAnt)",
        "a shorter trainer.segment_length",
    ]
    if getattr(trainer.algorithm, "critic", None) is None:
        remedies.append("a critic over shorter windows (algorithm.name: shac)")
    return (
        f"; its rollout was finite and the updates before it had gradient norms up to "
        f"{max(finite):.3g} before clipping: the gradient through the window grows until it "
        f"overflows, as through contacts and stiff dynamics; bound it with "
        f"{', '.join(remedies[:-1])} or {remedies[-1]}"
    )


def _locate_nan_gradient(trainer: Any, snapshot: Any, update: Callable[[], Any]) -> str | None:
    """The user's line whose backward gave NaN first, from the update replayed under
    anomaly detection (then the trainer's state as it was)."""
    now = type(snapshot).take(trainer)
    try:
        snapshot.restore(trainer)
        return locate_nan_gradient(update)
    finally:
        now.restore(trainer)


_MASKED_BRANCH = (
    "a common cause is torch.where (or a mask) choosing between branches where the unchosen "
    "one is inf or NaN (sqrt, log or a division at 0): its gradient is 0 x NaN = NaN; make "
    "that branch's input safe first (torch.where(x > 0, x, 1.0) before the sqrt)"
)


def _gradient_cause(trainer: Any, metrics: dict[str, float]) -> str:
    if metrics.get("skipped_excessive_gradient"):
        limit = getattr(trainer.algorithm.cfg, "max_grad_norm_before_clip", 0.0)
        norm = metrics.get("grad_norm", math.nan)
        if math.isfinite(norm):
            return (
                f"its gradient norm {norm:.3g} exceeds "
                f"algorithm.cfg.max_grad_norm_before_clip ({limit:g})"
            )
    if not math.isfinite(metrics.get("loss", 0.0)):
        return "its loss (the negated return) is not finite"
    return "its policy gradient is not finite"


def _replay(trainer: Any, snapshot: Any, steps: int) -> tuple[str, bool]:
    """What was not finite in the update's rollout, replayed ('' when all was finite), and
    whether a step turned a finite state non-finite (not a reset, nor the start).

    ``snapshot``: the :class:`~pathgrad.trainer.interruption.UpdateSnapshot` taken
    before the update.
    """
    now = type(snapshot).take(trainer)
    start_step = trainer.global_step - steps * trainer.global_num_envs
    try:
        snapshot.restore(trainer)
        with torch.no_grad():
            rollout = trainer.collector.collect(
                steps, deterministic=trainer.cfg.deterministic_actions
            )
            rewards = ~torch.isfinite(rollout.rewards)  # [T, N]
            observations = ~torch.isfinite(rollout.observations).flatten(2).all(-1)  # [T, N]
            started = observations[0].clone()  # not finite before the update's first step
            following = torch.stack([t.next_observation for t in rollout.transitions])
            after = ~torch.isfinite(following).flatten(2).all(-1)  # [T, N]
            observations = observations | after
            done = torch.stack([t.done for t in rollout.transitions]).reshape(after.shape)
    finally:
        now.restore(trainer)
    parts = []
    num_envs = trainer.env.num_envs
    for name, bad in (("reward", rewards), ("observation", observations)):
        rows = int(bad.any(0).sum())
        if rows:
            first = int(bad.any(1).nonzero()[0, 0])
            parts.append(
                f"non-finite {name} in {rows} of {num_envs} envs from env step "
                f"{start_step + first * trainer.global_num_envs:,}"
            )
    reset = started | (after & done).any(0)
    stepped = ((after & ~done) | rewards).any(0) & ~started
    if bool(reset.any()):
        parts.append(
            f"the state was not finite after a reset (or at the start) in {int(reset.sum())} "
            f"of {num_envs} envs: the initial state itself is not finite"
        )
    return ", ".join(parts), bool(stepped.any())
