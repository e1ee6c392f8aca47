"""Export a trained policy for deployment: ``torch.export`` (``.pt2``) or ONNX (``.onnx``).

Both files hold the deterministic policy with the observation normalizer
folded in and actions clamped to the action space, for any batch size, and
carry pathgrad's metadata (env, spaces, versions, source checkpoint) as JSON:
in the ``.pt2`` archive as the extra file ``pathgrad.json``, in the ONNX model
as the metadata property ``pathgrad``. Neither needs pathgrad to run:

    program = torch.export.load("policy.pt2"); actions = program.module()(obs)
    session = onnxruntime.InferenceSession("policy.onnx")
    actions = session.run(None, {"observation": obs})[0]

TorchScript (``torch.jit.trace``), pathgrad's former format, is deprecated in
PyTorch 2.13 and warns on save and load; ``torch.export`` replaces it in
Python and, through AOTInductor, in C++, and ONNX serves every other runtime.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from pathgrad.core.atomic_files import atomic_write
from pathgrad.normalization import RunningObservationNormalizer
from pathgrad.policies import Policy, as_tensor_policy

__all__ = [
    "EXPORT_FORMATS",
    "METADATA_KEY",
    "DeployedPolicy",
    "export_metadata",
    "export_policy",
    "read_metadata",
]

EXPORT_FORMATS = {".pt2": "torch.export", ".onnx": "ONNX"}
METADATA_KEY = "pathgrad"  # the ONNX metadata property; in .pt2 archives "pathgrad.json"
_PT2_METADATA = "pathgrad.json"


class DeployedPolicy(nn.Module):
    """Deterministic action of raw observations: normalize, the policy's mean action, bound.

    Args:
        policy: The trained policy, of either calling convention (a TensorDict
            one is called through :func:`~pathgrad.policies.as_tensor_policy`).
        normalizer: Its observation normalizer, folded in (or ``None``).
        action_bounds: ``(low, high)`` of the action space; actions are clamped
            to them (a no-op for a squashed policy), so the deployed policy
            never leaves the space it was trained for.
    """

    def __init__(
        self,
        policy: Policy,
        normalizer: RunningObservationNormalizer | None,
        action_bounds: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> None:
        super().__init__()
        self.policy = policy
        dtype = next(policy.parameters()).dtype
        if normalizer is None:
            dim = getattr(policy, "observation_dim", None)
            if dim is None:
                dim = policy.mean_net[0].in_features if hasattr(policy, "mean_net") else 1
            shift, scale = torch.zeros(dim, dtype=dtype), torch.ones(dim, dtype=dtype)
            low = torch.full((dim,), -torch.inf, dtype=dtype)
            high = torch.full((dim,), torch.inf, dtype=dtype)
        else:
            shift, scale, low, high = normalizer.constants(dtype)
        self.register_buffer("shift", shift.detach().clone())
        self.register_buffer("scale", scale.detach().clone())
        self.register_buffer("low", low.detach().clone())
        self.register_buffer("high", high.detach().clone())
        if action_bounds is None:
            action_dim = getattr(policy, "action_dim", None)
            if action_dim is None:
                action_dim = int(policy.log_std.shape[0]) if hasattr(policy, "log_std") else 1
            action_bounds = (
                torch.full((action_dim,), -torch.inf),
                torch.full((action_dim,), torch.inf),
            )
        self.register_buffer("action_low", action_bounds[0].detach().to(dtype).clone())
        self.register_buffer("action_high", action_bounds[1].detach().to(dtype).clone())

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        normalized = torch.clamp((observation - self.shift) * self.scale, self.low, self.high)
        acting = as_tensor_policy(self.policy)
        action = acting.get_differentiable_action(normalized, deterministic=True)["action"]
        return torch.clamp(action, self.action_low, self.action_high)


def export_policy(
    policy: Policy,
    normalizer: RunningObservationNormalizer | None,
    example_observation: torch.Tensor,
    output: str | Path,
    action_bounds: tuple[torch.Tensor, torch.Tensor] | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> Path:
    """Export the deployed policy to ``output`` (``.pt2`` or ``.onnx``), written atomically.

    Args:
        policy: The trained policy.
        normalizer: Its observation normalizer (folded in), or ``None``.
        example_observation: Observations ``[B, D]`` to trace with; the
            exported program takes any batch size.
        output: Destination; its suffix chooses the format.
        action_bounds: ``(low, high)`` actions are clamped to.
        metadata: JSON-serialisable facts stored in the file.

    Raises:
        ValueError: If the suffix is not ``.pt2`` or ``.onnx``.
        OSError: If ``output`` cannot be written (nothing is left behind).
    """
    output = Path(output)
    suffix = output.suffix.lower()
    if suffix not in EXPORT_FORMATS:
        raise ValueError(
            f"cannot export to '{output.name}': give a .pt2 (torch.export) or .onnx file name "
            "(TorchScript .pt files are no longer written: torch.jit is deprecated)."
        )
    module = DeployedPolicy(policy, normalizer, action_bounds).eval()
    for parameter in module.parameters():
        parameter.requires_grad_(False)
    text = json.dumps(dict(metadata or {}), sort_keys=True)
    example = example_observation.detach().reshape(-1, example_observation.shape[-1])
    if example.shape[0] == 1:  # a size-1 example would be specialised to batch 1
        example = example.expand(2, -1).contiguous()
    with _quiet_exporters(), torch.no_grad():
        payload = _serialized(module, example, suffix, text)
    # Written from memory: torch's zip writer aborts the process on a failing write (a
    # full disk), while a plain write raises OSError naming the cause.
    return atomic_write(output, lambda handle: handle.write(payload))


def _serialized(module: DeployedPolicy, example: torch.Tensor, suffix: str, text: str) -> bytes:
    """The exported program of ``module`` as the bytes of a ``suffix`` file, ``text`` inside."""
    batch = torch.export.Dim("batch", min=1)
    if suffix == ".pt2":
        program = torch.export.export(module, (example,), dynamic_shapes=({0: batch},))
        buffer = io.BytesIO()
        torch.export.save(program, buffer, extra_files={_PT2_METADATA: text})
        return buffer.getvalue()
    onnx_program = torch.onnx.export(
        module, (example,), dynamic_shapes=({0: batch},), dynamo=True, verbose=False,
        input_names=["observation"], output_names=["action"],
    )  # fmt: skip
    model = onnx_program.model_proto
    import onnx

    onnx.helper.set_model_props(model, {METADATA_KEY: text})
    return model.SerializeToString()


def export_metadata(config: Any, checkpoint: Mapping[str, Any], source: Path, env: Any) -> dict:
    """What an exported file says about itself: env, spaces, versions, source checkpoint."""
    import platform

    import pathgrad

    def space(box: Any) -> dict[str, Any]:
        return {"shape": list(box.shape), "low": box.low.tolist(), "high": box.high.tolist()}

    return {
        "format": "pathgrad.exported_policy",
        "env": config.env.name,
        "observation_space": space(env.single_observation_space),
        "action_space": space(env.single_action_space),
        "input": "raw observations [batch, obs_dim], float"
        f"{64 if config.env.dtype == 'float64' else 32}",
        "output": "deterministic actions [batch, act_dim], clamped to the action space",
        "observation_normalizer_folded_in": checkpoint.get("observation_normalizer") is not None,
        "source_checkpoint": str(source),
        "global_step": int(checkpoint.get("global_step", 0)),
        "pathgrad_version": pathgrad.__version__,
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
    }


def read_metadata(path: str | Path) -> dict[str, Any]:
    """The pathgrad metadata of an exported ``.pt2`` or ``.onnx`` file.

    Raises:
        ValueError: If the file has none or is not an export.
    """
    path = Path(path)
    if path.suffix.lower() == ".onnx":
        import onnx

        model = onnx.load(str(path), load_external_data=False)
        properties = {entry.key: entry.value for entry in model.metadata_props}
        text = properties.get(METADATA_KEY)
    else:
        extra = {_PT2_METADATA: ""}
        torch.export.load(str(path), extra_files=extra)
        text = extra[_PT2_METADATA] or None
    if not text:
        raise ValueError(f"'{path}' carries no pathgrad metadata.")
    return json.loads(text)


@contextlib.contextmanager
def _quiet_exporters() -> Iterator[None]:
    """The exporters' progress lines, optional-dependency and deprecation notes, silenced."""
    loggers = [logging.getLogger(name) for name in ("torch.onnx", "torch._dynamo", "torch.export")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
