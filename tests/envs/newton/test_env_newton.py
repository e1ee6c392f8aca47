"""Newton backend: NewtonCartPoleSwingUp against the torch CartPoleSwingUp, gradients
through the autograd bridge, the shared-solver trap, bad input, training and resume."""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

newton = pytest.importorskip("newton", reason="the Newton backend needs pathgrad[newton]")

import warm_processes  # noqa: E402
from helpers import ROOT, assert_same_windows, learning_state  # noqa: E402
from pathgrad.envs import CartPoleSwingUp  # noqa: E402
from pathgrad.envs.newton import NewtonCartPoleSwingUp, NewtonEnv, NewtonStep  # noqa: E402
from pathgrad.runs.config import ConfigError, load_config  # noqa: E402
from pathgrad.runs.run import build_policy, build_run  # noqa: E402
from pathgrad.testing import check_env_gradients  # noqa: E402

PATHGRAD = str(Path(sys.executable).parent / "pathgrad")


def test_the_trajectory_equals_the_torch_envs_up_to_float32_rounding():
    env = NewtonCartPoleSwingUp(4, seed=3, max_episode_steps=40)
    twin = CartPoleSwingUp(4, seed=3, max_episode_steps=40)
    observation, _ = env.reset(seed=5)
    assert torch.equal(observation, twin.reset(seed=5)[0])  # the same initial-state draws
    generator = torch.Generator().manual_seed(0)
    for _ in range(100):  # through two auto-resets
        action = torch.randn(4, 1, generator=generator)
        ours, theirs = env.step(action), twin.step(action)
        for got, want in zip(ours[:4], theirs[:4], strict=True):
            assert torch.allclose(got.float(), want.float(), atol=2e-4)
        assert torch.allclose(
            ours[4]["final_observation"], theirs[4]["final_observation"], atol=2e-4
        )


def test_gradients_agree_with_the_torch_envs_exact_jacobian_and_finite_differences():
    env = NewtonCartPoleSwingUp(4, seed=3, max_episode_steps=6)
    twin = CartPoleSwingUp(4, dtype="float64", max_episode_steps=6)
    assert check_env_gradients(
        env, 6, reference_env=twin, reference_state=env._torch_state, rtol=1e-3
    )
    assert check_env_gradients(NewtonCartPoleSwingUp(2, substeps=4, max_episode_steps=5), 5)


def test_one_tape_over_shared_solver_substeps_is_wrong_and_the_bridge_is_not():
    """NVIDIA/warp#260: Featherstone keeps per-step buffers on the solver object."""
    import warp as wp

    env = NewtonCartPoleSwingUp(1, substeps=8, dt=0.08)
    simulation, model = env.simulation, env.simulation.model
    q = np.array([0.0, math.pi - 1.0], np.float32)
    qd = np.array([1.0, 4.0], np.float32)
    force = np.array([5.0, 0.0], np.float32)

    def outputs_sum(cart_force: float) -> float:
        forces = torch.tensor([[cart_force, 0.0]])
        out_q, out_qd, _ = simulation.forward(
            torch.from_numpy(q)[None], torch.from_numpy(qd)[None], forces
        )
        return float(out_q.double().sum() + out_qd.double().sum())

    eps = 1e-2
    reference = (outputs_sum(force[0] + eps) - outputs_sum(force[0] - eps)) / (2 * eps)

    states = [model.state(requires_grad=True) for _ in range(simulation.substeps + 1)]
    control = model.control(requires_grad=True)
    states[0].joint_q.assign(q)
    states[0].joint_qd.assign(qd)
    control.joint_f.assign(force)
    tape = wp.Tape()
    with tape:  # the trap: one tape, one solver, several substeps
        for k in range(simulation.substeps):
            simulation.solver.step(states[k], states[k + 1], control, None, simulation.substep_dt)
    ones = wp.array(np.ones(2, np.float32))
    tape.backward(grads={states[-1].joint_q: ones, states[-1].joint_qd: wp.clone(ones)})
    naive = float(control.joint_f.grad.numpy()[0])

    forces = torch.from_numpy(force)[None].requires_grad_()
    out_q, out_qd = NewtonStep.apply(
        simulation, torch.from_numpy(q)[None], torch.from_numpy(qd)[None], forces
    )
    (out_q.sum() + out_qd.sum()).backward()
    bridge = float(forces.grad[0, 0])
    assert abs(naive - reference) > 0.05 * abs(reference)  # the trap is real (about 10%)
    assert bridge == pytest.approx(reference, rel=2e-3)


def test_captured_graphs_replay_the_step_and_its_gradients_bit_for_bit():
    captured = NewtonCartPoleSwingUp(3, substeps=4, seed=1, max_episode_steps=7)
    launched = NewtonCartPoleSwingUp(3, substeps=4, seed=1, max_episode_steps=7, capture=False)
    assert captured.simulation.capture and not launched.simulation.capture
    assert_same_windows(captured, launched, 16)
    assert set(captured.simulation._graphs) == {"step", "adjoint", "zero_adjoint"}
    assert not launched.simulation._graphs
    # A second window replays the same graphs: adjoints do not leak between backward passes.
    assert_same_windows(captured, captured, 5, seed=2)


class Swing(NewtonEnv):
    """A user's env in a few lines: a model file and a reward."""

    def _reward(self, state, action, next_state):
        return -next_state["joint_q"].square().sum(-1)


def test_an_observation_of_another_width_says_where_the_expected_width_came_from(tmp_path):
    from pathgrad.core.env_contract import reset_problems

    arm = tmp_path / "arm.xml"
    arm.write_text(ARM)
    Angles = type("Angles", (Swing,), {"_observe": lambda self, state: state["joint_q"]})
    env = Angles(2, model_file=arm)
    (problem,) = reset_problems(env, env.reset(seed=0))
    assert str(problem) == (
        "observation: expected shape (2, 2), got (2, 1); Angles sets no observation_dim, so it "
        "is the model's 1 joint coordinates + 1 DOFs (the default _observe's width): set "
        "observation_dim on the class to the width your _observe returns"
    )
    Fixed = type("Fixed", (Angles,), {"observation_dim": 1})
    env = Fixed(2, model_file=arm)
    assert reset_problems(env, env.reset(seed=0)) == []


def test_hooks_returning_the_wrong_shape_are_named(tmp_path):
    arm = tmp_path / "arm.xml"
    arm.write_text(ARM)

    class OneForce(Swing):
        def extra_joint_forces(self, state):
            return -state["joint_qd"][:, 0]  # [N]: would broadcast to [N, N]

    class NoVelocities(Swing):
        def _sample_initial_state(self, num):
            return {"joint_q": self.default_joint_q.expand(num, -1).clone()}

    env = OneForce(2, model_file=arm)
    with pytest.raises(ValueError, match=r"OneForce.extra_joint_forces must return shape "
                       r"\(2, 1\) \(num_envs, dofs\), got \(2,\)"):  # fmt: skip
        env.step(torch.zeros(2, 1))
    with pytest.raises(ValueError, match=r"NoVelocities._sample_initial_state\(2\) must return "
                       r"'joint_qd' of shape \(2, 1\); got no such entry"):  # fmt: skip
        NoVelocities(2, model_file=arm)


def test_bad_input_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="model_file '.*nowhere.xml' does not exist"):
        Swing(1, model_file=tmp_path / "nowhere.xml")
    broken = tmp_path / "broken.xml"
    broken.write_text("<mujoco><worldbody><body>")
    with pytest.raises(ValueError, match="cannot load model_file"):
        Swing(1, model_file=broken)
    with pytest.raises(ValueError, match="must be an MJCF"):
        Swing(1, model_file=Path(__file__))
    arm = tmp_path / "arm.xml"
    arm.write_text(ARM)
    with pytest.raises(ValueError, match="actuated joint 'elbow' does not exist; joints: shoulder"):
        Swing(1, model_file=arm, actuated_joints=["elbow"])
    with pytest.raises(ValueError, match="must be a list of joint names, got 'shoulder'"):
        Swing(1, model_file=arm, actuated_joints="shoulder")
    with pytest.raises(ValueError, match=r"action_scale must be a number or 1 values \(one per"):
        Swing(1, model_file=arm, action_scale=[1.0, 2.0])
    for scale in (float("nan"), 0.0, [float("inf")]):
        with pytest.raises(ValueError, match="action_scale must be finite and non-zero"):
            Swing(1, model_file=arm, action_scale=scale)
    with pytest.raises(
        ValueError,
        match=r"action_scale must be a number or 1 values \(one per actuated DOF\), got 'abc'",
    ):
        Swing(1, model_file=arm, action_scale="abc")
    assert float(Swing(1, model_file=arm, action_scale=-2.0).action_scale[0]) == -2.0
    fixed = tmp_path / "fixed.xml"
    fixed.write_text(ARM.replace("</body>", "<body name='tip' pos='0.5 0 0'><geom "
                                 "type='sphere' size='0.05'/></body></body>"))  # fmt: skip
    with pytest.raises(ValueError, match="actuated joint 'tip_joint' is fixed .* joints with "
                       "DOFs: shoulder[.]"):  # fmt: skip
        Swing(1, model_file=fixed, actuated_joints=["tip_joint"])
    with pytest.raises(ValueError, match="actuated joint 'shoulder' is given twice"):
        Swing(1, model_file=arm, actuated_joints=["shoulder", "shoulder"])
    ball = tmp_path / "ball.xml"
    ball.write_text(
        "<mujoco><worldbody><body name='ball'><freejoint/><geom type='sphere' size='0.1'/>"
        "</body></worldbody></mujoco>"
    )
    passive = Swing(2, model_file=ball)  # a passive model steps without actions (it falls)
    assert passive.action_dim == 0 and Swing(2, model_file=arm, actuated_joints=[]).action_dim == 0
    passive.reset(seed=0)
    assert passive.step(torch.zeros(2, 0))[0].shape == (2, 13)
    with pytest.raises(ConfigError, match=r"env.name: NewtonReacher has no actions \(a space of "
                       r"shape \(0,\)\); a policy needs at least one of each"):  # fmt: skip
        build_policy(load_config(None, ["env.name=NewtonReacher"]), passive)
    with pytest.raises(
        ValueError, match=r"solver must be one of \['featherstone', 'semi_implicit'\], got 'xpbd'"
    ):
        Swing(1, model_file=arm, solver="xpbd")
    with pytest.raises(ValueError, match="computes in float32"):
        NewtonCartPoleSwingUp(1, dtype="float64")
    with pytest.raises(ValueError, match=r"action must have shape \(2, 1\)"):
        NewtonCartPoleSwingUp(2).step(torch.zeros(2, 3))
    with pytest.raises(ConfigError, match="env.dtype: NewtonCartPoleSwingUp computes in float32"):
        load_config(ROOT / "configs" / "newton_cartpole_swingup.yaml", ["env.dtype=float64"])
    with pytest.raises(ConfigError, match="trainer.torch_compile: NewtonCartPoleSwingUp cannot"):
        load_config(
            ROOT / "configs" / "newton_cartpole_swingup.yaml", ["trainer.torch_compile=true"]
        )


ARM = """<mujoco>
  <worldbody>
    <body name="upper" pos="0 0 1">
      <joint name="shoulder" type="hinge" axis="0 1 0"/>
      <geom type="capsule" fromto="0 0 0 0.5 0 0" size="0.05"/>
    </body>
  </worldbody>
</mujoco>
"""


def test_without_newton_the_error_names_the_extra(tmp_path):
    shadow = tmp_path / "shadow" / "newton"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('No module named newton')\n")
    env = {**os.environ, "PYTHONPATH": str(shadow.parent), "OMP_NUM_THREADS": "1"}
    result = warm_processes.run(
        [PATHGRAD, "train", "env.name=NewtonCartPoleSwingUp", "--quiet"], cwd=tmp_path, env=env
    )
    assert result.returncode == 2, result.stderr
    assert "pip install 'pathgrad[newton]'" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_training_resumes_exactly(tmp_path):
    overrides = [
        "env.num_envs=4",
        "trainer.segment_length=8",
        "eval.frequency_steps=0",
        "policy.hidden_sizes=[8]",
        "algorithm.cfg.lr_scheduler.kwargs.total_iters=40",  # the same LR curve for both runs
    ]
    config = load_config(ROOT / "configs" / "newton_cartpole_swingup.yaml", overrides)
    straight = build_run(config, tmp_path / "a").trainer
    straight.train(total_updates=4)
    first = build_run(config, tmp_path / "b").trainer
    first.train(total_updates=2)
    path = first.save_checkpoint()
    second = build_run(config, tmp_path / "c").trainer
    second.load_checkpoint(path)
    second.train(total_updates=4)
    for name, value in learning_state(straight).items():
        assert torch.equal(value, learning_state(second)[name]), name
    assert torch.equal(straight.env.state["joint_q"], second.env.state["joint_q"])


def test_the_command_line_trains_evaluates_and_exports_a_newton_env(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    config = str(ROOT / "configs" / "newton_cartpole_swingup.yaml")
    fast = ["trainer.total_updates=2", "env.num_envs=8", "eval.frequency_steps=512"]
    result = warm_processes.run(
        [PATHGRAD, "train", config, *fast, "eval.num_envs=4", "eval.episodes=4", "--quiet"],
        cwd=tmp_path, env=env,
    )  # fmt: skip
    assert result.returncode == 0 and result.stderr == "", result.stderr
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert run_dir.name.startswith("newton_cart_pole_swing_up-")
    for command in (["eval", str(run_dir), "--json"], ["resume", str(run_dir), "--quiet"]):
        result = warm_processes.run([PATHGRAD, *command], cwd=tmp_path, env=env)
        assert result.returncode == 0, result.stderr


def test_newton_reacher_fingertip_and_gradients():
    from pathgrad.envs.newton import NewtonReacher

    env = NewtonReacher(3, seed=0)
    env.reset(seed=1)
    for _ in range(5):
        env.step(torch.randn(3, 2, generator=torch.Generator().manual_seed(2)))
    joint_q = env.state["joint_q"].detach()
    model = env.simulation.model
    state = model.state()
    state.joint_q.assign(joint_q.reshape(-1).numpy())
    newton.eval_fk(model, state.joint_q, state.joint_qd, state)
    poses = state.body_q.numpy().reshape(3, 2, 7)  # forearm: position, quaternion xyzw
    axis, w = poses[:, 1, 3:6], poses[:, 1, 6:7]
    tip = np.array([0.5, 0.0, 0.0])
    rotated = tip + 2 * np.cross(axis, np.cross(axis, tip) + w * tip)
    assert np.allclose(poses[:, 1, :2] + rotated[:, :2], env.fingertip(joint_q).numpy(), atol=1e-5)
    assert check_env_gradients(NewtonReacher(2, seed=0, max_episode_steps=5), 5)


# Joints are explicit springs: stable only for substeps well below 1 / sqrt(ke / inertia)
# (the default damping 1e2 would need ~100x smaller ones on these thin links).
SEMI_IMPLICIT_ARM = {
    "solver": "semi_implicit",
    "substeps": 64,
    "solver_options": {"joint_attach_ke": 1.0e3, "joint_attach_kd": 1.0},
}
STIFF_SEMI_IMPLICIT_ARM = {
    "solver": "semi_implicit",
    "substeps": 256,
    "solver_options": {"joint_attach_ke": 1.0e4, "joint_attach_kd": 1.0},
}


def test_semi_implicit_carries_bodies_and_follows_featherstone():
    from pathgrad.envs.newton import NewtonReacher

    env = NewtonReacher(2, seed=3, max_episode_steps=6, **STIFF_SEMI_IMPLICIT_ARM)
    twin = NewtonReacher(2, seed=3, max_episode_steps=6, substeps=256)  # same step size
    assert env.state["body_q"].shape == (2, 14) and env.state["body_qd"].shape == (2, 12)
    assert torch.equal(env.reset(seed=5)[0], twin.reset(seed=5)[0])
    for _ in range(5):  # stiff joint springs, another integrator: close, not equal
        env.step(torch.full((2, 2), 0.5))
        twin.step(torch.full((2, 2), 0.5))
        assert torch.allclose(env.state["joint_q"], twin.state["joint_q"], atol=3e-3)
        assert torch.allclose(env.state["joint_qd"], twin.state["joint_qd"], atol=0.05, rtol=0.05)
    _, _, terminated, truncated, info = env.step(torch.zeros(2, 2))  # episode ends: fresh bodies
    assert truncated.all()
    fresh = env._body_coordinates(env.state["joint_q"], env.state["joint_qd"])
    assert torch.equal(env.state["body_q"], fresh["body_q"])


def test_semi_implicit_gradients_and_captured_graphs():
    from pathgrad.envs.newton import NewtonReacher

    env = NewtonReacher(2, seed=0, max_episode_steps=4, **SEMI_IMPLICIT_ARM)
    assert check_env_gradients(env, 5)
    captured = NewtonReacher(2, seed=1, max_episode_steps=3, **SEMI_IMPLICIT_ARM)
    launched = NewtonReacher(2, seed=1, max_episode_steps=3, capture=False, **SEMI_IMPLICIT_ARM)
    assert_same_windows(captured, launched, 5)


def test_a_step_that_blows_up_names_the_stiff_damping_and_what_tames_it(tmp_path):
    from pathgrad.testing import check_env

    arm = tmp_path / "arm.xml"
    arm.write_text(ARM)
    # explicit damping (implicit_damping=False; the file's Euler would integrate it implicitly)
    stiff = Swing(2, model_file=arm, joint_damping=200.0, action_scale=2.0, armature=0.0,
                  implicit_damping=False, dt=1.0 / 60.0)  # fmt: skip
    result = check_env(stiff, gradients=False, max_rollout_steps=50)
    (failure,) = result["rollout"].failures
    assert "is not finite" in failure or "is nan" in failure or "inf" in failure
    assert (
        "a Newton step that turns non-finite usually has a force too stiff for its substep: "
        "substep 0.0167 s (1 per env step of 0.0167 s); joint damping 200 on joint 'shoulder' "
        "(armature 0) gives substep x its fastest rate (max eig of M^-1 C at the model's pose) "
        "= 8.32, above the bound 2 of explicit damping at that pose (poses of more inertia "
        "allow more). Raise armature or substeps"
    ) in failure
    tamed = Swing(2, model_file=arm, joint_damping=200.0, action_scale=2.0, armature=5.0,
                  implicit_damping=False, dt=1.0 / 60.0)  # fmt: skip
    assert check_env(tamed, gradients=False, max_rollout_steps=50)["rollout"].passed
    assert "= 0.617, below the bound 2" in tamed.instability_hint()  # 200 x 0.0167 / 5.4


def test_a_skipped_update_of_a_blowing_up_newton_env_names_the_stiff_damping(tmp_path):
    from pathgrad.algo import APG, APGCfg
    from pathgrad.differentiable_trainer import DifferentiableTrainer, DifferentiableTrainerCfg
    from pathgrad.policies import GaussianMLPPolicy

    arm = tmp_path / "arm.xml"
    arm.write_text(ARM)
    env = Swing(2, model_file=arm, joint_damping=200.0, action_scale=2.0, seed=0,
                implicit_damping=False, dt=1.0 / 60.0)  # fmt: skip
    torch.manual_seed(0)
    policy = GaussianMLPPolicy(env.observation_dim, env.action_dim, hidden_sizes=(8,))
    settings = DifferentiableTrainerCfg(segment_length=16, update_horizon=16,
                                        checkpoint_dir=str(tmp_path / "run"))  # fmt: skip
    algorithm = APG(APGCfg(), policy)
    trainer = DifferentiableTrainer(settings, env, policy, algorithm)
    notices: list[str] = []
    trainer.notify = notices.append
    assert trainer.train(total_updates=2)["status"] == "completed"  # below the limit
    notice, every = notices
    assert every.startswith("every one of the run's 2 updates was skipped")
    assert notice.startswith("update 1 was skipped: its policy gradient is not finite; ")
    assert "; a Newton step that turns non-finite usually has a force too stiff" in notice


def test_a_reset_that_gives_a_non_finite_state_is_named_without_the_stiffness_hint(tmp_path):
    from pathgrad.algo import APG, APGCfg
    from pathgrad.differentiable_trainer import DifferentiableTrainer, DifferentiableTrainerCfg
    from pathgrad.policies import GaussianMLPPolicy

    class LaterNan(Swing):
        """Finite at construction and the first reset; every later reset gives NaN angles."""

        resets = 0

        def _sample_initial_state(self, num):
            state = super()._sample_initial_state(num)
            LaterNan.resets += 1
            if LaterNan.resets > 2:
                state = {**state, "joint_q": torch.full_like(state["joint_q"], float("nan"))}
            return state

    arm = tmp_path / "arm.xml"
    arm.write_text(ARM)
    env = LaterNan(2, model_file=arm, max_episode_steps=4, seed=0)
    torch.manual_seed(0)
    policy = GaussianMLPPolicy(env.observation_dim, env.action_dim, hidden_sizes=(8,))
    settings = DifferentiableTrainerCfg(segment_length=8, update_horizon=8,
                                        checkpoint_dir=str(tmp_path / "run"))  # fmt: skip
    trainer = DifferentiableTrainer(settings, env, policy, APG(APGCfg(), policy))
    notices: list[str] = []
    trainer.notify = notices.append
    trainer.train(total_updates=1)
    assert notices[0].startswith("update 1 was skipped: non-finite ")
    assert "the state was not finite after a reset (or at the start) in 2 of 2 envs" in notices[0]
    assert "force too stiff" not in notices[0]  # no step made it so: no stiffness hint
