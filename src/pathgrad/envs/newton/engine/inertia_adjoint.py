"""The adjoint of Featherstone's tiled mass matrix, written out.

Newton's Featherstone (``use_tile_gemm``, ``fuse_cholesky``) evaluates each
articulation's joint-space mass matrix ``H = sum_b J_b^T M_b J_b`` (``M_b`` the
6x6 spatial inertia of body ``b``, ``J_b`` its rows of the motion Jacobian) and
the Cholesky factor ``L`` of ``H + diag(armature)`` in one tile kernel, which
Warp differentiates tile by tile: on the CPU its adjoint took 2.3-6.8 ms per 64
Ants against 0.72 ms forward (0.8 ms written out), up to a fifth of an env
step's adjoint on ``DiffRLAnt`` (one mass-matrix evaluation per 16 substeps;
docs/benchmarks.md).

What that adjoint has to carry is ``H``'s: Newton's dense solve
(``adj_dense_solve``) writes the adjoint of the solved matrix, ``-x_bar x^T``,
into both ``H``'s and ``L``'s adjoint arrays, and the Cholesky factor's own
adjoint must not add ``L``'s again (Warp's tile adjoint reads nothing from it:
tested). :func:`replace_tile_adjoints` puts in its place, on a recorded
``wp.Tape``, two small kernels of the closed forms

    dJ_b += M_b J_b dH^T + M_b^T J_b dH,    dM_b += J_b dH J_b^T

(only ``M``'s diagonal blocks are read). The forward kernel is unchanged; the
adjoints agree with Warp's within float32 rounding (the sums run in another
order), tested in ``tests/envs/newton/test_inertia_adjoint.py``.
"""

from __future__ import annotations

import functools
from typing import Any

import warp as wp

__all__ = ["TileInertiaAdjoint", "replace_tile_adjoints"]

_TILE_KERNEL = "eval_dense_gemm_and_cholesky_tile"


@functools.cache
def _kernels(num_dofs: int) -> tuple[Any, Any]:
    """The adjoint kernels for articulations of ``num_dofs`` degrees of freedom (one thread
    per row of ``J``: Warp's CPU threads cost more than these rows' arithmetic)."""
    n = num_dofs
    row_vector = wp.types.vector(length=n, dtype=float)

    @wp.kernel(enable_backward=False, module="unique")
    def jacobian_adjoint(
        J: wp.array3d[float],
        M: wp.array3d[float],
        H_grad: wp.array3d[float],
        J_grad: wp.array3d[float],
        J_dH: wp.array3d[float],
    ):
        """Row ``row`` of ``dJ += M J dH^T + M^T J dH``, and of ``J dH^T`` for ``dM``."""
        a, row = wp.tid()
        base = (row // 6) * 6
        mj = row_vector()
        mtj = row_vector()
        for k in range(6):
            m = M[a, row, base + k]
            mt = M[a, base + k, row]
            for c in range(n):
                j = J[a, base + k, c]
                mj[c] += m * j
                mtj[c] += mt * j
        for c in range(n):
            g = float(0.0)  # noqa: UP018 - a Warp variable, not a constant
            v = float(0.0)  # noqa: UP018 - a Warp variable, not a constant
            for d in range(n):
                g += mj[d] * H_grad[a, c, d] + mtj[d] * H_grad[a, d, c]
                v += H_grad[a, c, d] * J[a, row, d]
            J_grad[a, row, c] = J_grad[a, row, c] + g
            J_dH[a, row, c] = v

    @wp.kernel(enable_backward=False, module="unique")
    def inertia_adjoint(
        J: wp.array3d[float],
        J_dH: wp.array3d[float],
        M_grad: wp.array3d[float],
    ):
        """Row ``row`` of ``dM_b += J_b dH J_b^T`` (its diagonal block)."""
        a, row = wp.tid()
        base = (row // 6) * 6
        for k in range(6):
            s = float(0.0)  # noqa: UP018 - a Warp variable, not a constant
            for i in range(n):
                s += J[a, row, i] * J_dH[a, base + k, i]
            M_grad[a, row, base + k] = M_grad[a, row, base + k] + s

    return jacobian_adjoint, inertia_adjoint


class TileInertiaAdjoint:
    """The adjoint of one recorded launch of the tile kernel, as a tape entry.

    Args:
        tape: The tape the launch was recorded on (its adjoint arrays).
        launch: The recorded launch (kernel, dim, ..., inputs, outputs, device, ...).
    """

    def __init__(self, tape: Any, launch: Any) -> None:
        self.tape = tape
        self.inputs = launch[3]  # what the entry reads (rigid_id_adjoint inspects it)
        self.J, self.M = launch[3][:2]
        self.H = launch[4][0]
        self.device = launch[5]
        groups, rows, dofs = self.J.shape
        self.kernels = _kernels(int(dofs))
        self.dim = (groups, rows)
        self.J_dH = wp.zeros((groups, rows, dofs), dtype=float, device=self.device)

    def __call__(self) -> None:
        """Warp launches: accumulate the adjoints of ``J`` and ``M`` from that of ``H``."""
        J_grad, M_grad, H_grad = (self.tape.get_adjoint(x) for x in (self.J, self.M, self.H))
        if J_grad is None or M_grad is None or H_grad is None:
            raise RuntimeError("the tile kernel's arrays have no adjoints (requires_grad)")
        jacobian, inertia = self.kernels
        launch = functools.partial(wp.launch, dim=self.dim, device=self.device, record_tape=False)
        launch(jacobian, inputs=[self.J, self.M, H_grad, J_grad, self.J_dH])
        launch(inertia, inputs=[self.J, self.J_dH, M_grad])


def replace_tile_adjoints(tape: Any) -> int:
    """Give each recorded launch of Featherstone's fused mass-matrix tile kernel on ``tape``
    the written-out adjoint (:class:`TileInertiaAdjoint`); returns how many were replaced."""
    replaced = 0
    for index, launch in enumerate(tape.launches):
        if isinstance(launch, list | tuple) and launch[0].key.endswith(_TILE_KERNEL):
            tape.launches[index] = TileInertiaAdjoint(tape, launch)
            replaced += 1
    return replaced
