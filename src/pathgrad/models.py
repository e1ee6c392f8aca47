"""The reference's policy models: ``ActorOnly``, its ``Policy`` base, ``MLP`` and the builders.

``embodichain.learning.rl.models`` ported: the same constructors, the same
TensorDict calling convention (a TensorDict with ``obs`` in; ``action``,
``sample_log_prob``, ``entropy`` and ``value`` written into it) and the same
policy config (``{name: actor_only, initial_log_std, actor: {type: mlp,
network_cfg: {...}}}``). :class:`ActorOnly` also takes observation tensors
(pathgrad's convention), so the trainer, SHAC, evaluation and export use it as
any :class:`pathgrad.policies.Policy`. Nothing here imports ``tensordict``: a
TensorDict comes from the caller (``evaluate_actions`` builds one only when
given one).
"""

from __future__ import annotations

import inspect
import math
from abc import ABCMeta, abstractmethod
from collections.abc import Mapping, MutableMapping, Sequence
from typing import Any

import torch
from torch import nn

from pathgrad.mlp import MLP
from pathgrad.policies import Policy as TensorPolicy
from pathgrad.policies import PolicyOutput

__all__ = [
    "MLP",
    "ActorOnly",
    "Policy",
    "build_mlp_from_cfg",
    "build_policy",
    "get_policy_class",
    "get_registered_policy_names",
    "register_policy",
]

class Policy(nn.Module, metaclass=ABCMeta):
    """The reference's policy base: TensorDict in, the same TensorDict with outputs out.

    Subclass it to port a policy of the reference; pathgrad calls it through
    :func:`pathgrad.policies.as_tensor_policy`, so it trains, evaluates and
    exports like pathgrad's own (``get_differentiable_action`` must then use a
    reparameterized sample).
    """

    calling_convention = "tensordict"
    device: torch.device

    def get_action(self, tensordict: Any, deterministic: bool = False) -> Any:
        """:meth:`forward` without a graph: ``action``, ``sample_log_prob``, ``value``."""
        with torch.no_grad():
            return self.forward(tensordict, deterministic=deterministic)

    def get_differentiable_action(self, tensordict: Any, deterministic: bool = False) -> Any:
        """Reparameterized outputs with the graph kept (subclasses implement it).

        Raises:
            NotImplementedError: Always, here: a plain ``sample()`` would give
                zero pathwise gradients without a word.
        """
        raise NotImplementedError(
            f"{type(self).__name__} does not implement differentiable action sampling."
        )

    @abstractmethod
    def forward(self, tensordict: Any, deterministic: bool = False) -> Any:
        """Write the sampled action and the value estimate into ``tensordict``."""

    @abstractmethod
    def get_value(self, tensordict: Any) -> Any:
        """Write ``value`` into ``tensordict``."""

    @abstractmethod
    def evaluate_actions(self, tensordict: Any) -> Any:
        """``sample_log_prob``, ``entropy`` and ``value`` of ``tensordict["action"]``, new."""


class ActorOnly(Policy, TensorPolicy):
    """Diagonal Gaussian around ``actor(obs)`` with a learned, state-independent ``log_std``.

    The reference's actor-only policy: ``log_std`` starts at 0 and is clamped to
    ``[log_std_min, log_std_max]`` = ``[-5, 2]`` where it is used; samples of
    :meth:`get_differentiable_action` are reparameterized (``mean + std *
    noise``). Called with a TensorDict (or any mutable mapping with ``obs``) it
    writes ``action``, ``sample_log_prob``, ``entropy`` (reparameterized calls)
    and ``value`` (zeros: no critic) into it and returns it, as the reference
    does. Called with a tensor it is a :class:`pathgrad.policies.Policy`
    (``action``, ``log_prob``, ``entropy``, ``mean``); ``get_action``'s default
    is then deterministic, as pathgrad's contract has it (the reference's
    TensorDict default is a sample).

    Args:
        obs_dim: Observation size.
        action_dim: Action size.
        device: Device of the actor and ``log_std``.
        actor: Network from observations to the action mean.
        actor_obs_groups: The reference's observation groups; pathgrad's
            observations are tensors, so only ``None``.
        initial_log_std: Initial ``log_std`` (pathgrad's keyword; the reference
            fills it after construction from the config's ``initial_log_std``).
    """

    calling_convention = "both"

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        device: torch.device | str,
        actor: nn.Module,
        actor_obs_groups: Sequence[str] | None = None,
        *,
        initial_log_std: float = 0.0,
    ) -> None:
        super().__init__()
        if actor_obs_groups is not None:
            raise ValueError(
                "actor_obs_groups: pathgrad's observations are tensors [N, D], not groups."
            )
        self.obs_dim = self.actor_obs_dim = int(obs_dim)
        self.action_dim = int(action_dim)
        self.actor_obs_groups = None
        self.device = torch.device(device)
        self.actor = actor.to(self.device)
        self.log_std = nn.Parameter(
            torch.full((self.action_dim,), float(initial_log_std), device=self.device)
        )
        self.log_std_min = -5.0
        self.log_std_max = 2.0

    def _gaussian(
        self, obs: torch.Tensor, deterministic: bool, reparameterized: bool
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Mean, clamped log-std, action and the standardized action ``(a - mean) / std``."""
        mean = self.actor(obs)
        log_std = self.log_std.clamp(self.log_std_min, self.log_std_max).expand_as(mean)
        if deterministic:
            return mean, log_std, mean, torch.zeros_like(mean)
        noise = torch.randn(mean.shape, dtype=mean.dtype, device=mean.device)
        action = mean + log_std.exp() * noise
        if reparameterized:
            return mean, log_std, action, noise
        action = action.detach()  # sample(): the log-density keeps its score-function graph
        return mean, log_std, action, (action - mean) / log_std.exp()

    @staticmethod
    def _log_prob(log_std: torch.Tensor, standard: torch.Tensor) -> torch.Tensor:
        return (-0.5 * standard.pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)

    @staticmethod
    def _entropy(log_std: torch.Tensor) -> torch.Tensor:
        return (0.5 + 0.5 * math.log(2 * math.pi) + log_std).sum(-1)

    def _write(
        self, tensordict: MutableMapping[str, Any], deterministic: bool, reparameterized: bool
    ) -> MutableMapping[str, Any]:
        """The reference's outputs written into ``tensordict``."""
        obs = tensordict["obs"]
        _, log_std, action, standard = self._gaussian(obs, deterministic, reparameterized)
        tensordict["action"] = action
        tensordict["sample_log_prob"] = self._log_prob(log_std, standard)
        if reparameterized:
            tensordict["entropy"] = self._entropy(log_std)
        tensordict["value"] = torch.zeros(obs.shape[0], device=obs.device, dtype=obs.dtype)
        return tensordict

    def _outputs(self, obs: torch.Tensor, deterministic: bool) -> PolicyOutput:
        """pathgrad's outputs; ``log_prob`` and ``entropy`` computed when read."""
        mean, log_std, action, standard = self._gaussian(obs, deterministic, True)
        return PolicyOutput(
            {"action": action, "mean": mean},
            {
                "log_prob": lambda: self._log_prob(log_std, standard),
                "entropy": lambda: self._entropy(log_std),
            },
        )

    def forward(self, tensordict: Any, deterministic: bool = False) -> Any:
        """A sampled (not reparameterized) action: written into a mapping, or a tensor."""
        if isinstance(tensordict, torch.Tensor):
            return self._gaussian(tensordict, deterministic, False)[2]
        return self._write(tensordict, deterministic, reparameterized=False)

    def get_differentiable_action(self, tensordict: Any, deterministic: bool = False) -> Any:
        """A reparameterized action with the graph kept, in the convention of the argument."""
        if isinstance(tensordict, torch.Tensor):
            return self._outputs(tensordict, deterministic)
        return self._write(tensordict, deterministic, reparameterized=True)

    def get_action(self, tensordict: Any, deterministic: bool | None = None) -> Any:
        """Without a graph. Default: the mean for a tensor, a sample for a TensorDict."""
        with torch.no_grad():
            if isinstance(tensordict, torch.Tensor):
                deterministic = True if deterministic is None else deterministic
                return self._gaussian(tensordict, deterministic, False)[2]
            return self.forward(tensordict, deterministic=bool(deterministic))

    def get_value(self, tensordict: Any) -> Any:
        """Write ``value`` (zeros: the policy has no critic)."""
        obs = tensordict["obs"]
        tensordict["value"] = torch.zeros(obs.shape[0], device=obs.device, dtype=obs.dtype)
        return tensordict

    def evaluate_actions(self, tensordict: Any) -> Any:
        """Log-probability and entropy of ``tensordict["action"]`` (and zero values), new."""
        obs, action = tensordict["obs"], tensordict["action"]
        mean, log_std, _, _ = self._gaussian(obs, True, False)
        values = {
            "sample_log_prob": self._log_prob(log_std, (action - mean) / log_std.exp()),
            "entropy": self._entropy(log_std),
            "value": torch.zeros(obs.shape[0], device=obs.device, dtype=obs.dtype),
        }
        if type(tensordict).__module__.startswith("tensordict"):
            from tensordict import TensorDict

            return TensorDict(values, batch_size=tensordict.batch_size, device=tensordict.device)
        return values


_POLICY_REGISTRY: dict[str, type[nn.Module]] = {}


def register_policy(name: str, policy_cls: type[nn.Module]) -> None:
    """Register a policy class under ``name`` for :func:`build_policy`.

    Raises:
        ValueError: If the name is taken.
    """
    if name in _POLICY_REGISTRY:
        raise ValueError(f"Policy '{name}' is already registered")
    _POLICY_REGISTRY[name] = policy_cls


def get_registered_policy_names() -> list[str]:
    """Registered policy names, in registration order."""
    return list(_POLICY_REGISTRY)


def get_policy_class(name: str) -> type[nn.Module] | None:
    """The class registered under ``name``, or ``None``."""
    return _POLICY_REGISTRY.get(name)


def _dim(space_or_dim: Any, name: str) -> int:
    """An int, or the last size of a Box-like space's shape."""
    if isinstance(space_or_dim, int):
        return space_or_dim
    shape = getattr(space_or_dim, "shape", None)
    if shape:
        return int(shape[-1])
    raise TypeError(f"{name} must be an int or a flat Box space, got {type(space_or_dim)!r}.")


def build_mlp_from_cfg(module_cfg: Mapping[str, Any], in_dim: int, out_dim: int) -> MLP:
    """An :class:`MLP` from ``{type: mlp, network_cfg: {hidden_sizes, activation, ...}}``.

    ``network_cfg`` keys: ``hidden_sizes``, ``activation`` (``elu``),
    ``last_activation``, ``use_layernorm``, ``dropout_p``, ``orthogonal_init``
    (a gain, or one per linear layer: orthogonal weights, zero biases).

    Raises:
        ValueError: For another ``type``, an unknown ``network_cfg`` key or a bad value.
    """
    if str(module_cfg.get("type", "")).lower() != "mlp":
        raise ValueError("Only 'mlp' type is supported for actor/critic in this setup.")
    network_cfg = dict(module_cfg.get("network_cfg") or {})
    known = {"hidden_sizes", "activation", "last_activation", "use_layernorm", "dropout_p"}
    unknown = sorted(set(network_cfg) - known - {"orthogonal_init"})
    if unknown or "hidden_sizes" not in network_cfg:
        problem = f"unknown keys {unknown}" if unknown else "no hidden_sizes"
        raise ValueError(f"network_cfg has {problem}; expected some of {sorted(known)}.")
    model = MLP(
        in_dim,
        out_dim,
        network_cfg["hidden_sizes"],
        network_cfg.get("activation", "elu"),
        last_activation=network_cfg.get("last_activation"),
        use_layernorm=bool(network_cfg.get("use_layernorm", False)),
        dropout_p=float(network_cfg.get("dropout_p", 0.0)),
    )
    if "orthogonal_init" in network_cfg:
        model.init_orthogonal(network_cfg["orthogonal_init"])
    return model


def build_policy(
    policy_block: Mapping[str, Any],
    obs_space: Any,
    action_space: Any,
    device: torch.device | str,
    actor: nn.Module | None = None,
    critic: nn.Module | None = None,
) -> nn.Module:
    """A registered policy from the reference's policy config.

    ``actor`` defaults to the network of ``policy_block["actor"]``
    (:func:`build_mlp_from_cfg`), and ``initial_log_std`` fills ``log_std``,
    as the reference's training entry point does after building.

    Raises:
        ValueError: For an unregistered name, a missing actor, or ``obs_groups``.
    """
    name = str(policy_block["name"]).lower()
    if name not in _POLICY_REGISTRY:
        available = ", ".join(get_registered_policy_names())
        raise ValueError(f"Policy '{name}' is not registered. Available policies: {available}")
    if policy_block.get("obs_groups") is not None:
        raise ValueError("policy.obs_groups: pathgrad's observations are tensors, not groups.")
    policy_cls = _POLICY_REGISTRY[name]
    accepted = inspect.signature(policy_cls.__init__).parameters
    obs_dim = _dim(obs_space, "obs_space")
    action_dim = _dim(action_space, "action_space")
    if actor is None and policy_block.get("actor") is not None:
        actor = build_mlp_from_cfg(policy_block["actor"], obs_dim, action_dim)
    if actor is None and policy_cls is ActorOnly:
        raise ValueError("ActorOnly policy requires external 'actor' module.")
    offered: dict[str, Any] = {
        "obs_space": obs_space,
        "obs_dim": obs_dim,
        "action_space": action_space,
        "action_dim": action_dim,
        "device": torch.device(device),
        "actor": actor,
        "critic": critic,
    }
    policy = policy_cls(
        **{key: value for key, value in offered.items() if key in accepted and value is not None}
    )
    if "initial_log_std" in policy_block and hasattr(policy, "log_std"):
        with torch.no_grad():
            policy.log_std.fill_(float(policy_block["initial_log_std"]))
    return policy


register_policy("actor_only", ActorOnly)
