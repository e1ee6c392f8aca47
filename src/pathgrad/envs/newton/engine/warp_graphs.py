"""Warp operations the bridge runs: captured graphs on torch's stream, and the
external-wrench fix that Featherstone's adjoint needs (see
:mod:`pathgrad.envs.newton.engine.bridge`)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch
import warp as wp

__all__ = ["restore_external_forces", "run_captured", "torch_ordered_stream"]


@wp.kernel(enable_backward=False)
def _restore_external_forces(
    body_q_com: wp.array[wp.transform],
    body_solve_origin: wp.array[wp.vec3],
    body_f_ext: wp.array[wp.spatial_vector],
):
    """Undo the in-place conversion of Featherstone's ``eval_rigid_tau`` (COM wrench ->
    negated solve-frame wrench), so that its adjoint reads the wrench it was given."""
    body = wp.tid()
    converted = body_f_ext[body]
    force = -wp.spatial_top(converted)
    arm = wp.transform_get_translation(body_q_com[body]) - body_solve_origin[body]
    torque = -wp.spatial_bottom(converted) - wp.cross(arm, force)
    body_f_ext[body] = wp.spatial_vector(force, torque)


def restore_external_forces(state: Any) -> None:
    """Before a taped Featherstone step is backpropagated: give ``eval_rigid_tau``'s adjoint
    the external (contact) wrenches it read. Newton 1.8 overwrites them in place, and its
    adjoint then linearizes the moment arm about the negated force, which breaks the
    gradients with respect to positions in contact (d/dx of a translation-invariant
    step is not 0 without this)."""
    wp.launch(
        _restore_external_forces,
        dim=len(state.body_f_ext),
        inputs=[state.body_q_com, state.body_solve_origin, state.body_f_ext],
        device=state.body_f_ext.device,
        record_tape=False,
    )


def torch_ordered_stream(device: Any) -> Any:
    """The Warp stream whose work stays ordered with torch's on ``device`` (None on the CPU).

    Torch's current stream, unless it is the legacy default stream (handle 0, torch's
    default), on which CUDA cannot capture a graph ("Warp error: unknown stream"): then
    Warp's own stream of the device, a blocking stream, which the legacy default stream
    orders with (each waits for the other's earlier work).
    """
    if not device.is_cuda:
        return None
    current = torch.cuda.current_stream(device.alias)
    return wp.stream_from_torch(current) if current.cuda_stream else wp.get_stream(device)


def run_captured(
    graphs: dict[str, Any],
    name: str,
    operations: Callable[[], None],
    device: Any,
    stream: Any = None,
    capture: bool = True,
) -> None:
    """Run ``operations`` (on ``stream``), or replay their graph ``graphs[name]``, captured
    on the first call when ``capture``."""
    with contextlib.nullcontext() if stream is None else wp.ScopedStream(stream):
        if not capture:
            operations()
            return
        graph = graphs.get(name)
        if graph is None:
            with wp.ScopedCapture(device=device) as recording:
                operations()
            graph = graphs[name] = recording.graph
        wp.capture_launch(graph)
