"""Featherstone with its mass matrix held across the substeps of a step, as dflex's caching.

dflex (the SHAC benchmark's simulator) evaluates the mass matrix every
``MM_caching_frequency`` substeps and reuses it in between; the DiffRL robots
are defined with it. The adjoints that the substeps reusing a mass matrix (and
its Cholesky factor) give it are summed into the adjoint of the substep that
evaluated it, and from there reach that substep's joint coordinates.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import torch
import warp as wp

from pathgrad.envs.newton.engine.bridge import NewtonSimulation
from pathgrad.envs.newton.engine.saved_arrays import SavedArrays

__all__ = ["MassMatrixCachingSimulation", "hold_mass_matrix"]


class MassMatrixCachingSimulation(NewtonSimulation):
    """Featherstone evaluating its mass matrix at substeps ``0, n, 2n, ...`` of every step.

    Newton's ``update_mass_matrix_interval`` counts solver calls (and a captured
    graph replays the choice made at capture); here the count restarts with
    every env step. Backward, per block of substeps sharing a mass matrix: it is
    put back as the forward pass evaluated it at the block's first substep
    (:mod:`~pathgrad.envs.newton.engine.saved_arrays`; with ``keep_mass_matrix`` false,
    evaluated again, untaped), the reusing substeps are differentiated with it
    held, and their adjoints of it are added to those of the first substep's
    own adjoint pass, which evaluates it under the tape. Each variant is its own
    captured graph.
    """

    keep_mass_matrix = True  # 2 x dofs^2 floats per env and block: kept, not recomputed

    def __init__(self, model: Any, *, mass_matrix_interval: int, **kwargs: Any) -> None:
        self.interval = int(mass_matrix_interval)
        options = {**(kwargs.pop("solver_options", None) or {})}
        options["update_mass_matrix_interval"] = self.interval
        super().__init__(model, solver="featherstone", solver_options=options, **kwargs)
        self._tapes: dict[bool, Any] = {}
        # Adjoints of the mass matrix and its factor, carried from the substeps reusing them.
        matrices = (self.solver.H, self.solver.L)
        self._grad_mass = [wp.to_torch(a.grad, requires_grad=False) for a in matrices]
        blocks = -(-self.substeps // self.interval)
        self.saved_mass = SavedArrays(matrices, blocks) if self.keep_mass_matrix else None

    def _after_substep(self, k: int) -> None:
        super()._after_substep(k)
        if self.saved_mass is not None and k % self.interval == 0:
            self.saved_mass.save(k // self.interval)

    def forward(
        self,
        position: torch.Tensor,
        velocity: torch.Tensor,
        joint_f: torch.Tensor,
        keep_inputs: bool = True,
    ) -> tuple[torch.Tensor, ...]:
        """:meth:`NewtonSimulation.forward`, each block's first substep input also holding
        the mass matrix and factor the forward pass evaluated there (else ``None``)."""
        x_final, v_final, inputs = super().forward(position, velocity, joint_f, keep_inputs)
        if self.saved_mass is None or not inputs:
            return x_final, v_final, inputs
        rows = self.saved_mass.rows()
        held = [
            rows[k // self.interval] if k % self.interval == 0 else None for k in range(len(inputs))
        ]
        return x_final, v_final, [(*entry, row) for entry, row in zip(inputs, held, strict=True)]

    def _count_from(self, evaluate: bool) -> None:
        """Make the solver's next step evaluate the mass matrix, or reuse the held one."""
        self.solver._step = 0 if evaluate else 1  # the solver decides by _step % interval

    def _variants(self) -> list[Any]:
        return [True, False]  # evaluates the mass matrix, or reuses it

    def _variant_of(self, k: int) -> Any:
        return k % self.interval == 0

    def _set_variant(self, key: Any) -> None:
        super()._set_variant(key)
        self._count_from(bool(key))

    def _kept_elsewhere(self) -> tuple[Any, ...]:
        # held per block (or evaluated again)
        return (self.solver.H, self.solver.L, *super()._kept_elsewhere())

    def _step_operations(self) -> None:
        self._count_from(True)
        super()._step_operations()

    def _mass_matrix_operations(self) -> None:
        """Evaluate (untaped) the mass matrix and its factor at ``_backward_in``."""
        self._prepare_backward()
        self._count_from(True)
        self._substep(
            self._backward_in,
            self._backward_out,
            self._backward_control,
            detect=self.saved_contacts is None,
        )

    def _cached_adjoint_operations(self, evaluate: bool) -> None:
        self._set_variant(evaluate)
        self._adjoint_operations()
        self._tapes[evaluate] = self._tape

    def _cached_zero_operations(self, evaluate: bool) -> None:
        self._tape = self._tapes[evaluate]
        self._zero_adjoint_operations()

    def backward(
        self,
        inputs: list[tuple[torch.Tensor | None, ...]],
        joint_f: torch.Tensor,
        grad_x: torch.Tensor,
        grad_v: torch.Tensor,
        joint_adjoints: Any = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        grad_x, grad_v = grad_x.reshape(-1), grad_v.reshape(-1)
        self._backward_f.copy_(joint_f.detach().reshape(-1))
        grad_f = torch.zeros(self.dofs, dtype=grad_x.dtype, device=grad_x.device)
        carried = [torch.zeros_like(grad) for grad in self._grad_mass]
        count = len(inputs)
        for k in reversed(range(count)):
            first = k - k % self.interval
            if k != first and k == min(first + self.interval, count) - 1:
                if self.saved_mass is not None:
                    self.saved_mass.load(inputs[first][4])
                    self._run("restore_mass_matrix", self.saved_mass.restore)
                else:
                    self._load_backward_input(inputs[first])
                    self._run("mass_matrix", self._mass_matrix_operations)
            evaluate = k == first
            self._load_backward_input(inputs[k])
            self._grad_out_x.copy_(grad_x)
            self._grad_out_v.copy_(grad_v)
            if evaluate:  # the reusing substeps' adjoints join this substep's, into the state
                for grad, total in zip(self._grad_mass, carried, strict=True):
                    grad.add_(total)
                    total.zero_()
            self._run(f"adjoint_{evaluate}", partial(self._cached_adjoint_operations, evaluate))
            if not evaluate:
                for grad, total in zip(self._grad_mass, carried, strict=True):
                    total.add_(grad)
            grad_x, grad_v = self._grad_in_x.clone(), self._grad_in_v.clone()
            grad_f = grad_f + self._grad_f
            self._run(f"zero_adjoint_{evaluate}", partial(self._cached_zero_operations, evaluate))
        return grad_x, grad_v, grad_f


def hold_mass_matrix(env: Any, interval: int) -> None:
    """Give a Featherstone Newton env a :class:`MassMatrixCachingSimulation` evaluating its
    mass matrix every ``interval`` substeps of a step, built with the options of the
    simulation it replaces (``env.simulation_options``); ``interval`` 1 keeps that one."""
    if interval > 1:
        env.simulation = MassMatrixCachingSimulation(
            env.simulation.model, mass_matrix_interval=interval, **env.simulation_options
        )
