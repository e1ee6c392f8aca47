"""The policy contract and a Gaussian MLP policy."""

from __future__ import annotations

import inspect
import math
from abc import ABCMeta, abstractmethod
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

__all__ = [
    "ACTIVATIONS",
    "CALLING_CONVENTIONS",
    "GaussianMLPPolicy",
    "Policy",
    "PolicyOutput",
    "TensorDictPolicyAdapter",
    "as_tensor_policy",
    "calling_convention",
    "hidden_layers",
    "register_action_bounds",
    "tanh_log_det",
]

ACTIVATIONS: dict[str, type[nn.Module]] = {
    "elu": nn.ELU,
    "relu": nn.ReLU,
    "tanh": nn.Tanh,
    "silu": nn.SiLU,
    "gelu": nn.GELU,
}


def hidden_layers(
    inputs: int,
    hidden_sizes: Sequence[int],
    activation: str,
    layer_norm: bool = False,
    *,
    norm_before_activation: bool = False,
) -> list[nn.Module]:
    """``Linear -> activation [-> LayerNorm]`` for every hidden width.

    ``layer_norm`` normalizes each hidden layer after its activation, as the
    SHAC paper's actor and critic networks do; with ``norm_before_activation``
    the order is ``Linear -> LayerNorm -> activation`` (SAPO's authors' MLPs).
    """
    layers: list[nn.Module] = []
    for width in hidden_sizes:
        norm = [nn.LayerNorm(int(width))] if layer_norm else []
        act = [ACTIVATIONS[activation]()]
        order = norm + act if norm_before_activation else act + norm
        layers += [nn.Linear(inputs, int(width)), *order]
        inputs = int(width)
    return layers


def tanh_log_det(pre_squash: torch.Tensor) -> torch.Tensor:
    """``log(1 - tanh(u)^2)`` per dimension, as ``2 (log 2 - u - softplus(-2u))``: stable
    for large ``|u|``."""
    return 2.0 * (math.log(2.0) - pre_squash - nn.functional.softplus(-2.0 * pre_squash))


def register_action_bounds(
    module: nn.Module,
    action_low: Any,
    action_high: Any,
    action_dim: int,
    *,
    squashing: str | None,
) -> None:
    """Register ``action_center`` and ``action_half_range`` buffers ``[A]`` of the box.

    ``squashing`` names what needs a finite box with ``high > low`` (it appears
    in the error); ``None`` accepts any bounds (an unsquashed policy ignores them).

    Raises:
        ValueError: If a squashing policy's bounds are not finite or not increasing.
    """
    low = torch.tensor(np.broadcast_to(action_low, (action_dim,)), dtype=torch.float32)
    high = torch.tensor(np.broadcast_to(action_high, (action_dim,)), dtype=torch.float32)
    if squashing is not None:
        if not bool(torch.isfinite(low).all() and torch.isfinite(high).all()):
            raise ValueError(f"{squashing} needs finite action_low and action_high.")
        if not bool((high > low).all()):
            raise ValueError("action_high must exceed action_low.")
    module.register_buffer("action_center", (high + low) / 2)
    module.register_buffer("action_half_range", (high - low) / 2)


class Policy(nn.Module, metaclass=ABCMeta):
    """A policy whose actions are differentiable in its parameters and inputs.

    It takes observation tensors ``[N, D]`` (the ``"tensor"`` calling
    convention). A policy of the reference's convention (a TensorDict with
    ``obs`` in, the same TensorDict with ``action`` written out) is used
    everywhere through :func:`as_tensor_policy`.
    """

    calling_convention = "tensor"

    @abstractmethod
    def get_differentiable_action(
        self, obs: torch.Tensor, deterministic: bool = False
    ) -> dict[str, torch.Tensor]:
        """Reparameterized action with the graph kept.

        Returns:
            A mapping with ``action`` ``[N, A]``, ``log_prob`` ``[N]``,
            ``entropy`` ``[N]`` and ``mean`` ``[N, A]`` (the deterministic action).
        """

    @torch.no_grad()
    def get_action(self, obs: torch.Tensor, deterministic: bool = True) -> torch.Tensor:
        """Action without a graph, for evaluation and deployment."""
        return self.get_differentiable_action(obs, deterministic=deterministic)["action"]


class GaussianMLPPolicy(Policy):
    """Diagonal Gaussian over actions, its mean an MLP of the observation.

    The log standard deviation is a learned vector independent of the
    observation. With ``squash=True`` the sample passes through ``tanh`` and is
    scaled to ``[action_low, action_high]``; ``log_prob`` then includes the
    change of variables, while ``entropy`` stays that of the Gaussian before
    squashing (the squashed entropy has no closed form).

    Args:
        observation_dim: Size of the observation.
        action_dim: Size of the action.
        hidden_sizes: Widths of the hidden layers.
        activation: One of ``elu``, ``relu``, ``tanh``, ``silu``, ``gelu``.
        init_log_std: Initial log standard deviation of every action dimension.
        squash: Bound actions with ``tanh`` to the action range.
        action_low: Lower action bound (scalar or per dimension), for ``squash``.
        action_high: Upper action bound, for ``squash``.
        layer_norm: A ``LayerNorm`` after every hidden activation.
    """

    def __init__(
        self,
        observation_dim: int,
        action_dim: int,
        hidden_sizes: Sequence[int] = (64, 64),
        activation: str = "elu",
        init_log_std: float = -0.5,
        squash: bool = False,
        action_low: float | Sequence[float] = -1.0,
        action_high: float | Sequence[float] = 1.0,
        layer_norm: bool = False,
    ) -> None:
        super().__init__()
        if observation_dim <= 0 or action_dim <= 0:
            raise ValueError("observation_dim and action_dim must be positive.")
        if activation not in ACTIVATIONS:
            raise ValueError(
                f"activation must be one of {sorted(ACTIVATIONS)}, got '{activation}'."
            )
        if any(int(width) <= 0 for width in hidden_sizes):
            raise ValueError(f"hidden_sizes must be positive, got {list(hidden_sizes)}.")
        layers = hidden_layers(observation_dim, hidden_sizes, activation, layer_norm)
        width_in = int(hidden_sizes[-1]) if len(hidden_sizes) else observation_dim
        head = nn.Linear(width_in, action_dim)
        with torch.no_grad():
            head.weight.mul_(0.01)
            head.bias.zero_()
        self.mean_net = nn.Sequential(*layers, head)
        self.log_std = nn.Parameter(torch.full((action_dim,), float(init_log_std)))
        self.squash = bool(squash)
        register_action_bounds(
            self, action_low, action_high, action_dim, squashing="squash" if self.squash else None
        )
        self._networks_compiled = False

    @classmethod
    def from_spaces(cls, observation_space, action_space, **kwargs) -> GaussianMLPPolicy:
        """Size the policy (and its squashing bounds) from gymnasium Box spaces."""
        return cls(
            int(observation_space.shape[-1]),
            int(action_space.shape[-1]),
            action_low=np.asarray(action_space.low, dtype=np.float64),
            action_high=np.asarray(action_space.high, dtype=np.float64),
            **kwargs,
        )

    def compile_networks(self, **compile_kwargs: Any) -> None:
        """Compile :meth:`action_from_noise` (network and distribution math).

        The noise is drawn eagerly, so compiled and eager runs sample the same
        actions; results agree up to floating-point reassociation.
        """
        compile_kwargs.setdefault("dynamic", False)
        self.action_from_noise = torch.compile(self.action_from_noise, **compile_kwargs)
        self._networks_compiled = True

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Deterministic action."""
        return self.get_differentiable_action(obs, deterministic=True)["action"]

    def get_differentiable_action(
        self, obs: torch.Tensor, deterministic: bool = False
    ) -> Mapping[str, torch.Tensor]:
        """Sample ``mean + std * noise`` (squashed if configured), keeping the graph.

        ``log_prob``, ``entropy`` (and a squashed ``mean``) are computed when
        first read (a :class:`PolicyOutput`; APG training reads only the
        action's graph), so an eager step pays for the action alone.
        """
        noise = self.sample_noise(obs, deterministic)
        if getattr(self, "_networks_compiled", False):  # compiled: tensors, not functions
            return self.action_from_noise(obs, noise)
        return self.action_from_noise(obs, noise, lazy=True)

    def sample_noise(self, obs: torch.Tensor, deterministic: bool = False) -> torch.Tensor | None:
        """Standard normal noise for ``obs`` from torch's global RNG; ``None`` if deterministic.

        The random half of :meth:`get_differentiable_action`.
        """
        if deterministic:
            return None
        shape = (*obs.shape[:-1], self.log_std.shape[0])
        return torch.randn(shape, dtype=self.log_std.dtype, device=obs.device)

    def action_from_noise(
        self, obs: torch.Tensor, noise: torch.Tensor | None, *, lazy: bool = False
    ) -> dict[str, torch.Tensor]:
        """Action, log-probability, entropy and mean for given noise (``None``: the mean).

        A pure function of its inputs and the parameters (the deterministic half
        of :meth:`get_differentiable_action`), so it can be compiled or fused.
        With ``lazy`` the result is a :class:`PolicyOutput` whose ``log_prob``
        and ``entropy`` are computed when first read.
        """
        mean = self.mean_net(obs)
        log_std = self.log_std.expand_as(mean)
        pre_squash = mean if noise is None else mean + log_std.exp() * noise

        def log_prob() -> torch.Tensor:
            standard = torch.zeros_like(mean) if noise is None else noise
            gaussian = (-0.5 * standard.pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
            if not self.squash:
                return gaussian
            log_det = tanh_log_det(pre_squash)
            return gaussian - (log_det + self.action_half_range.log()).sum(-1)

        def entropy() -> torch.Tensor:
            return (0.5 + 0.5 * math.log(2 * math.pi) + log_std).sum(-1)

        def squashed_mean() -> torch.Tensor:
            return self.action_center + self.action_half_range * torch.tanh(mean)

        if self.squash:
            action = self.action_center + self.action_half_range * torch.tanh(pre_squash)
        else:
            action = pre_squash
        if lazy:
            deferred = {"log_prob": log_prob, "entropy": entropy}
            if self.squash:
                return PolicyOutput({"action": action}, {**deferred, "mean": squashed_mean})
            return PolicyOutput({"action": action, "mean": mean}, deferred)
        return {
            "action": action,
            "log_prob": log_prob(),
            "entropy": entropy(),
            "mean": squashed_mean() if self.squash else mean,
        }


class PolicyOutput(MutableMapping[str, torch.Tensor]):
    """A policy's outputs; the entries given as functions are computed when first read.

    Behaves as the dict of :meth:`Policy.get_differentiable_action`: every key
    is present (``in`` and iteration do not compute anything), and an entry can
    be replaced (the collector replaces ``action`` by its clamped value).
    """

    def __init__(
        self,
        values: dict[str, torch.Tensor],
        deferred: dict[str, Callable[[], torch.Tensor]],
    ) -> None:
        self._values = dict(values)
        self._deferred = dict(deferred)

    def __getitem__(self, key: str) -> torch.Tensor:
        if key not in self._values:
            self._values[key] = self._deferred.pop(key)()
        return self._values[key]

    def __setitem__(self, key: str, value: torch.Tensor) -> None:
        self._deferred.pop(key, None)
        self._values[key] = value

    def __delitem__(self, key: str) -> None:
        if key in self._deferred:
            del self._deferred[key]
        else:
            del self._values[key]

    def __contains__(self, key: object) -> bool:
        return key in self._values or key in self._deferred

    def __iter__(self) -> Iterator[str]:
        yield from list(self._values)  # reading an entry while iterating moves it
        yield from [key for key in self._deferred if key not in self._values]

    def __len__(self) -> int:
        return len(self._values) + len(self._deferred)


# How a policy is called: "tensor" (pathgrad's), "tensordict" (the reference's: a
# TensorDict with "obs" in, the same one with "action" written back) or "both"
# (pathgrad.models.ActorOnly: the convention of its argument).
CALLING_CONVENTIONS = ("tensor", "tensordict", "both")
_TENSORDICT_ARGUMENTS = ("tensordict", "td", "tensor_dict")


def calling_convention(policy: Any) -> str:
    """The convention of ``policy``: its ``calling_convention``, else read from its methods.

    A policy that does not declare one and is not a :class:`Policy` is taken to
    use TensorDicts when the first argument of its ``get_differentiable_action``
    (or ``get_action``) is named ``tensordict`` (the reference's name).
    """
    declared = getattr(type(policy), "calling_convention", None)
    if declared in CALLING_CONVENTIONS:
        return declared
    for name in ("get_differentiable_action", "get_action"):
        method = getattr(policy, name, None)
        if not callable(method):
            continue
        try:
            parameters = list(inspect.signature(method).parameters)
        except (TypeError, ValueError):
            return "tensor"
        named = parameters[0] if parameters else ""
        return "tensordict" if named in _TENSORDICT_ARGUMENTS else "tensor"
    return "tensor"


def as_tensor_policy(policy: Any) -> Any:
    """``policy`` itself, or a TensorDict-convention policy behind pathgrad's tensor convention.

    The one place where the collector, evaluation, export (and through the
    collector the trainer and every algorithm) adapt the reference's policies.
    """
    if calling_convention(policy) != "tensordict":
        return policy
    return TensorDictPolicyAdapter(policy)


class TensorDictPolicyAdapter:
    """A policy of the reference's TensorDict convention, called with tensors.

    Observations ``[N, D]`` go in as ``TensorDict({"obs": obs}, batch_size=[N])``
    (``tensordict`` is imported on first use); the entries the policy writes come
    back as a dict, ``sample_log_prob`` renamed ``log_prob``. Any other attribute
    (``parameters``, ``train``, ``training``, ``state_dict``...) is the policy's own.

    Args:
        policy: The TensorDict-convention policy.
    """

    _RENAMED = {"sample_log_prob": "log_prob"}

    def __init__(self, policy: Any) -> None:
        self.__dict__["policy"] = policy

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["policy"], name)

    def get_differentiable_action(
        self, obs: torch.Tensor, deterministic: bool = False
    ) -> dict[str, torch.Tensor]:
        """The policy's reparameterized outputs for ``obs`` (graph kept)."""
        written = self.policy.get_differentiable_action(
            _as_tensordict(obs), deterministic=deterministic
        )
        return {self._RENAMED.get(key, key): written[key] for key in written.keys() if key != "obs"}

    @torch.no_grad()
    def get_action(self, obs: torch.Tensor, deterministic: bool = True) -> torch.Tensor:
        """The policy's action for ``obs``, without a graph."""
        return self.policy.get_action(_as_tensordict(obs), deterministic=deterministic)["action"]


def _as_tensordict(obs: torch.Tensor) -> Any:
    """``TensorDict({"obs": obs}, batch_size=[N])``; ``tensordict`` is an optional extra."""
    try:
        from tensordict import TensorDict
    except ImportError as error:
        raise ImportError(
            "a policy of the TensorDict calling convention needs the 'tensordict' package: "
            "pip install 'pathgrad[tensordict]'."
        ) from error
    return TensorDict({"obs": obs}, batch_size=[obs.shape[0]], device=obs.device)
