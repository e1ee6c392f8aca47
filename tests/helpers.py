"""Small envs, policies and checks shared by the tests."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gymnasium.spaces import Box

from pathgrad.collector import DifferentiableRollout, DifferentiableTransition
from pathgrad.env import DifferentiableRolloutSpec
from pathgrad.policies import Policy

TESTS = Path(__file__).resolve().parent  # the tests folder (scripts, data)
ROOT = TESTS.parent  # the repository


class ScalarEnv:
    """``x' = x + a``, reward ``-x'^2``; episodes of ``episode_steps`` restart at ``x0``.

    Written against the env contract directly (no pathgrad base class), so the
    tests also check that the contract is all the library needs.
    """

    def __init__(
        self,
        x0: Sequence[float],
        episode_steps: int = 100,
        dtype: torch.dtype = torch.float64,
        reward_hook: Callable[[torch.Tensor, int], torch.Tensor] | None = None,
    ) -> None:
        self.num_envs = len(x0)
        self.device = torch.device("cpu")
        self.max_episode_steps = episode_steps
        self.single_observation_space = Box(-np.inf, np.inf, (1,), np.float64)
        self.single_action_space = Box(-1.0, 1.0, (1,), np.float64)
        self.x0 = torch.tensor(x0, dtype=dtype).unsqueeze(-1)
        self.reward_hook = reward_hook
        self.total_steps = 0
        self.reset()

    def reset(self, *, seed: int | None = None, options: Any = None):
        self.x = self.x0.clone()
        self.t = torch.zeros(self.num_envs, dtype=torch.long)
        return self.x, {}

    def step(self, action: torch.Tensor):
        x_next = self.x + action
        reward = -(x_next**2).squeeze(-1)
        if self.reward_hook is not None:
            reward = self.reward_hook(reward, self.total_steps)
        self.total_steps += 1
        self.t = self.t + 1
        truncated = self.t >= self.max_episode_steps
        terminated = torch.zeros_like(truncated)
        self.x = torch.where(truncated.unsqueeze(-1), self.x0, x_next)
        self.t = torch.where(truncated, torch.zeros_like(self.t), self.t)
        info = {"final_observation": x_next, "metrics": {"position": x_next.detach().squeeze(-1)}}
        return self.x, reward, terminated, truncated, info

    def detach_state(self) -> torch.Tensor:
        self.x = self.x.detach()
        return self.x


class ScheduledScalarEnv(ScalarEnv):
    """A :class:`ScalarEnv` whose complete rollouts grow by one step each time."""

    def prepare_differentiable_rollout(self, rollout_index: int) -> DifferentiableRolloutSpec:
        horizon = 2 + rollout_index
        return DifferentiableRolloutSpec(
            num_steps=horizon, objective_scale=1.0 / horizon, metadata={"horizon": horizon}
        )


class LinearPolicy(Policy):
    """Deterministic ``a = w * obs`` with one scalar parameter ``w``."""

    def __init__(self, w: float = 0.3, dtype: torch.dtype = torch.float64) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.tensor(w, dtype=dtype))

    def get_differentiable_action(self, obs: torch.Tensor, deterministic: bool = False):
        action = self.w * obs
        zeros = torch.zeros(obs.shape[0], dtype=obs.dtype)
        return {"action": action, "mean": action, "log_prob": zeros, "entropy": zeros}


def make_rollout(
    rewards: Sequence[Sequence[float]],
    dones: Sequence[Sequence[bool]],
    entropies: Sequence[Sequence[float]] | None = None,
) -> DifferentiableRollout:
    """A rollout built by hand from ``[T][N]`` rewards and done flags."""
    rewards_t = torch.tensor(rewards, dtype=torch.float64, requires_grad=True)
    dones_t = torch.tensor(dones)
    num_envs = rewards_t.shape[1]
    observation = torch.zeros(num_envs, 1, dtype=torch.float64)
    transitions = []
    for step in range(rewards_t.shape[0]):
        output = {"action": torch.zeros(num_envs, 1, dtype=torch.float64)}
        if entropies is not None:
            output["entropy"] = torch.tensor(entropies[step], dtype=torch.float64)
        transitions.append(
            DifferentiableTransition(
                observation=observation,
                policy_output=output,
                reward=rewards_t[step],
                terminated=dones_t[step],
                truncated=torch.zeros_like(dones_t[step]),
                done=dones_t[step],
                next_observation=observation,
                info={},
            )
        )
    return DifferentiableRollout(observation, tuple(transitions))


def central_difference_gradient(
    loss: Callable[[], torch.Tensor], parameters: Sequence[torch.nn.Parameter], h: float = 1e-6
) -> list[torch.Tensor]:
    """Central finite differences of ``loss()`` in every parameter entry (float64)."""
    gradients = []
    with torch.no_grad():
        for parameter in parameters:
            gradient = torch.zeros_like(parameter)
            flat = parameter.view(-1)
            for index in range(flat.numel()):
                original = flat[index].item()
                flat[index] = original + h
                upper = float(loss())
                flat[index] = original - h
                lower = float(loss())
                flat[index] = original
                gradient.view(-1)[index] = (upper - lower) / (2 * h)
            gradients.append(gradient)
    return gradients


def relative_error(actual: Sequence[torch.Tensor], expected: Sequence[torch.Tensor]) -> float:
    """``|actual - expected| / |expected|`` over all entries together."""
    actual_flat = torch.cat([tensor.reshape(-1) for tensor in actual])
    expected_flat = torch.cat([tensor.reshape(-1) for tensor in expected])
    return float((actual_flat - expected_flat).norm() / expected_flat.norm())


def contact_point_mass(*args: Any, contact_scale: float = 100.0, **kwargs: Any) -> Any:
    """A PointMass that reports a fake contact signal, as envs with contacts do.

    ``info["contact_forces"]`` is ``contact_scale |position|`` in each of the 6
    components of 2 bodies and ``info["accelerations"]`` is 0 (floored to 1), so
    AHAC's contact value of an env is ``contact_scale |position| sqrt(12)``.
    """
    from pathgrad.envs import PointMass

    class ContactPointMass(PointMass):
        provides_contact_signal = True

        def _step_info_extras(self) -> dict[str, torch.Tensor]:
            size = self.state["position"].detach().norm(dim=-1) * contact_scale
            forces = size[:, None, None].expand(-1, 2, 6).clone()
            return {"contact_forces": forces, "accelerations": torch.zeros_like(forces)}

    return ContactPointMass(*args, **kwargs)


def float64_windows(
    *, squash: bool = False, layer_norm: bool = False, contacts: bool = False
) -> tuple[torch.nn.Module, Any, Callable[[int], Any]]:
    """Policy, normalizer and ``rollout(steps)`` for finite-difference checks of actor gradients.

    Three float64 PointMass envs with 3-step episodes (so windows cross a
    truncation), a small tanh policy and a fitted observation normalizer;
    every ``rollout(steps)`` call replays the same resets and noise.
    ``contacts``: the envs report a fake contact signal (:func:`contact_point_mass`).
    """
    from pathgrad.collector import DifferentiableCollector
    from pathgrad.envs import PointMass
    from pathgrad.normalization import RunningObservationNormalizer
    from pathgrad.policies import GaussianMLPPolicy

    torch.manual_seed(0)
    make = contact_point_mass if contacts else PointMass
    env = make(3, dtype="float64", max_episode_steps=3, seed=0)
    policy = GaussianMLPPolicy(
        6, 2, hidden_sizes=(8,), activation="tanh", squash=squash, layer_norm=layer_norm
    )
    policy = policy.double()
    with torch.no_grad():
        policy.mean_net[-1].weight.normal_(0.0, 0.5)
    normalizer = RunningObservationNormalizer(6)
    normalizer.update(torch.randn(64, 6, dtype=torch.float64))
    collector = DifferentiableCollector(env, policy, "cpu", observation_normalizer=normalizer)

    def rollout(steps: int):
        torch.manual_seed(11)
        collector.reset(seed=3)
        return collector.collect(steps)

    return policy, normalizer, rollout


def window_gradient_error(algorithm: Any, rollout: Callable[[], Any]) -> float:
    """Relative error of the policy gradient ``algorithm`` backpropagates for one window.

    Compared with central differences of the loss it accumulates (``_loss_total``)
    over the same window, ``rollout()`` replaying the same noise at every
    parameter value.
    """
    algorithm.begin_update()
    algorithm.accumulate_segment(rollout())
    parameters = list(algorithm.policy.parameters())
    analytic = [p.grad.clone() for p in parameters]
    algorithm.cancel_update()

    def loss() -> float:
        with torch.enable_grad():  # the algorithms backpropagate as they accumulate
            algorithm.begin_update()
            algorithm.accumulate_segment(rollout())
            value = algorithm._loss_total.item()
            algorithm.cancel_update()
        return value

    return relative_error(analytic, central_difference_gradient(loss, parameters))


def build_point_mass_trainer(
    checkpoint_dir,
    *,
    num_envs: int = 4,
    seed: int = 0,
    dtype: str = "float32",
    algorithm: str = "apg",
    policy_name: str = "gaussian_mlp",
    **overrides,
):
    """A small, fully seeded PointMass trainer with every optional part switched on.

    ``policy_name``: ``gaussian_mlp`` or ``squashed_normal`` (a state-dependent log-std).
    ``contacts=True``: training envs with a fake contact signal (:func:`contact_point_mass`).
    """
    from pathgrad.algo.registry import get_algorithm
    from pathgrad.differentiable_trainer import DifferentiableTrainer, DifferentiableTrainerCfg
    from pathgrad.envs import PointMass
    from pathgrad.policies import GaussianMLPPolicy

    torch.manual_seed(seed)
    make = contact_point_mass if overrides.pop("contacts", False) else PointMass
    env = make(num_envs, max_episode_steps=10, seed=seed, dtype=dtype)
    eval_env = PointMass(2, max_episode_steps=10, seed=seed + 1, dtype=dtype)
    if policy_name == "squashed_normal":
        from pathgrad.squashed_normal import SquashedNormalPolicy

        policy = SquashedNormalPolicy(6, 2, hidden_sizes=(16,)).to(env.dtype)
    else:
        policy = GaussianMLPPolicy(6, 2, hidden_sizes=(16,), squash=True).to(env.dtype)
    factory, cfg_type = get_algorithm(algorithm)  # any registered algorithm
    algorithm_cfg = overrides.pop("algorithm_cfg", None) or cfg_type(
        optimizer={"name": "adam", "learning_rate": 1e-2},
        lr_scheduler={"name": "linear", "kwargs": {"total_iters": 40, "end_factor": 0.5}},
    )
    settings = {
        "segment_length": 4,
        "update_horizon": 8,
        "normalize_observations": True,
        "action_adjoint_max_norm": 5.0,
        "checkpoint_dir": str(checkpoint_dir),
        "experiment_name": "test",
        "eval_frequency_steps": num_envs * 16,
        "num_eval_episodes": 2,
        "eval_seed": 7,
    }
    cfg = DifferentiableTrainerCfg(**{**settings, **overrides})
    learner = factory(algorithm_cfg, policy, env)
    return DifferentiableTrainer(cfg, env, policy, learner, eval_env=eval_env)


def learning_state(trainer) -> dict[str, torch.Tensor]:
    """Every tensor that defines where training stands, flattened by name."""
    state = {f"policy.{k}": v for k, v in trainer.policy.state_dict().items()}
    members = {name: value for name, value in vars(trainer.algorithm).items() if name != "policy"}
    optimizers = {}
    for name, value in members.items():  # critics, temperatures and their optimizers
        if isinstance(value, torch.optim.Optimizer):
            optimizers[name] = value
        elif isinstance(value, torch.nn.Parameter):
            state[name] = value.detach()
        elif isinstance(value, torch.nn.Module):
            state.update({f"{name}.{k}": v for k, v in value.state_dict().items()})
    for label, optimizer in optimizers.items():
        for index, values in optimizer.state_dict()["state"].items():
            for name, value in values.items():
                state[f"{label}.{index}.{name}"] = torch.as_tensor(value)
    if trainer.observation_normalizer is not None:
        for name in ("mean", "var", "count"):
            state[f"normalizer.{name}"] = getattr(trainer.observation_normalizer, name)
    return state


def window_with_gradients(env, steps: int, seed: int = 0):
    """Observations, rewards and action gradients of one window (through auto-resets)."""
    env.reset(seed=seed)
    generator = torch.Generator().manual_seed(seed)
    actions = torch.randn(steps, env.num_envs, env.action_dim, generator=generator)
    actions.requires_grad_(True)
    observations, rewards = [], []
    for action in actions:
        observation, reward, *_ = env.step(action)
        observations.append(observation)
        rewards.append(reward)
    torch.stack(rewards).sum().backward()
    return torch.stack(observations).detach(), torch.stack(rewards).detach(), actions.grad


def assert_same_windows(env: Any, twin: Any, steps: int, seed: int = 0) -> None:
    """Both envs give bit-identical observations, rewards and action gradients."""
    pairs = zip(
        window_with_gradients(env, steps, seed),
        window_with_gradients(twin, steps, seed),
        strict=True,
    )
    for got, want in pairs:
        assert torch.equal(got, want)


def run_cli(args: Sequence[str], cwd: Path | None = None) -> tuple[int, str, str]:
    """Run the ``pathgrad`` command in this process: exit status, stdout, stderr.

    For the command's own messages and exit statuses (seconds faster than a
    process each); what needs a process of its own (signals, a fresh import,
    the installed script) keeps a subprocess.
    """
    import contextlib
    import io
    import os

    from pathgrad.cli import main

    out, err, previous = io.StringIO(), io.StringIO(), os.getcwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as error:  # argparse's own errors
                code = error.code if isinstance(error.code, int) else 1
    finally:
        os.chdir(previous)
    return code, out.getvalue(), err.getvalue()


def train_run(folder: Path, *args: str) -> Path:
    """``pathgrad train ARGS`` in ``folder`` (in this process); the run directory it made."""
    code, _, stderr = run_cli(["train", *args], cwd=folder)
    assert code == 0, stderr
    (run_dir,) = (folder / "runs").iterdir()
    return run_dir


def copy_run(run_dir: Path, tmp_path: Path) -> Path:
    """A copy of ``run_dir`` at ``tmp_path / "run"`` for a test to damage."""
    import shutil

    return Path(shutil.copytree(run_dir, tmp_path / "run"))


def isolate_env_registry(monkeypatch) -> None:
    """Registrations made by the test are forgotten after it (the built-in envs stay)."""
    import pathgrad.env
    from pathgrad.core import env_registry

    pathgrad.env.get_registered_learning_env_names()  # the built-in envs first
    for owner, name in ((env_registry, "_REGISTRY"), (env_registry, "_DISPLAY_NAMES"),
                        (pathgrad.env, "_MODULE_REGISTRATIONS")):  # fmt: skip
        monkeypatch.setattr(owner, name, dict(getattr(owner, name)))


def file_probe(path: Path, num_envs: int = 1, quiet: bool = True, **options: Any) -> Any:
    """A NewtonEnv with no task (zero reward) on the model file ``path``, without capture,
    the file's construction notes silenced (``quiet``): for tests that hold a file against
    MuJoCo."""
    import warnings

    from pathgrad.envs.newton import NewtonEnv

    class Probe(NewtonEnv):
        def _reward(self, state, action, next_state):
            return torch.zeros(self.num_envs)

    with warnings.catch_warnings():
        if quiet:
            warnings.simplefilter("ignore")
        return Probe(num_envs, model_file=str(path), capture=False, **options)


def place_mujoco_state(env: Any, qpos: Any, qvel: Any) -> None:
    """Reset ``env`` (one row) and put it at MuJoCo's ``qpos``, ``qvel``."""
    env.reset(seed=0)
    joint_q, joint_qd = env.joint_state_from_mujoco(
        torch.as_tensor(qpos)[None].float(), torch.as_tensor(qvel)[None].float()
    )
    env.state = {**env.state, "joint_q": joint_q, "joint_qd": joint_qd}


def one_step_qacc(env: Any, model: Any, qpos: Any, qvel: Any, ctrl: Any = None,
                  dt: float = 1e-4) -> tuple[Any, Any]:  # fmt: skip
    """One env step of ``dt`` from MuJoCo's state as ``qacc`` (its change of ``qvel`` over
    ``dt``), and MuJoCo's ``qacc`` (``mj_forward``) of the same state and ``ctrl``."""
    import mujoco
    import numpy as np

    data = mujoco.MjData(model)
    data.qpos[:], data.qvel[:] = qpos, qvel
    if ctrl is not None:
        data.ctrl[:] = ctrl
    mujoco.mj_forward(model, data)
    place_mujoco_state(env, qpos, qvel)
    action = torch.zeros(1, env.action_dim) if ctrl is None else torch.tensor(ctrl)[None].float()
    env.step(action)
    _, after = env.mujoco_from_joint_state(env.state["joint_q"], env.state["joint_qd"])
    return (after[0].double().numpy() - np.asarray(qvel)) / dt, data.qacc.copy()


def newton_bodies(env: Any, joint_q: torch.Tensor, joint_qd: torch.Tensor) -> tuple[Any, Any]:
    """Body positions ``[B, 3]`` and twists ``[B, 6]`` (v of the COM, omega; world) of one
    row of a NewtonEnv's ``joint_q``, ``joint_qd`` (Newton's forward kinematics)."""
    import newton
    import warp as wp

    model = env.simulation.model
    state = model.state()
    newton.eval_fk(
        model, wp.array(joint_q[0].numpy()), wp.array(joint_qd[0].numpy()), state
    )  # fmt: skip
    return state.body_q.numpy()[:, :3], state.body_qd.numpy()
