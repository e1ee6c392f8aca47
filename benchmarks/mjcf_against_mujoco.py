"""Does an MJCF file mean on Newton what it means in MuJoCo? Any files, MuJoCo as the oracle.

For each file: load it as a :class:`~pathgrad.envs.newton.NewtonEnv` would (``model_file=``,
MuJoCo's meaning) and report

- ``bodies``: the largest distance between a body's position on Newton and MuJoCo's
  ``xpos`` (``mj_kinematics``) for the same random ``qpos``, over 3 draws (m);
- ``qacc``: one short step's joint accelerations against MuJoCo's ``qacc``
  (``mj_forward``, contacts off on both, inside the joint ranges, a random control
  within each actuator's range): the largest difference relative to the largest
  ``|qacc|`` (at least 1); and the same against a MuJoCo model without what the notes
  name as left out (equality constraints, tendon limits, fluid forces, ball and free
  joints' friction loss, actuators of sites and bodies), so what
  remains is what is not named (or what a penalty does differently: a hinge's friction
  loss where the control accelerates it faster than it slips);
- the actions against the file's actuators, and each note the env gives at
  construction (what it does not apply, and what it did instead).

A file Newton cannot load, or that MuJoCo rejects, is one line saying why. Use it on
your own robot before training it (``pip install 'pathgrad[mujoco]'``):

    python benchmarks/mjcf_against_mujoco.py my_robot.xml other.xml

With no file it surveys Gymnasium's MuJoCo assets (installed with pathgrad). Prints a
Markdown table; ``--notes`` adds the notes under it.
"""

from __future__ import annotations

import argparse
import copy
import warnings
from pathlib import Path

import numpy as np
import torch

from pathgrad.envs.newton.model_files.mjcf_actuators import read_mjcf_motors
from pathgrad.testing.mujoco_states import inside_the_ranges, random_state

N_DRAWS = 3
STEP = 1e-4  # s: one explicit step, short enough to read an acceleration off


def _probe_class():
    from pathgrad.envs.newton import NewtonEnv

    class Probe(NewtonEnv):
        """A NewtonEnv with no task: the file's bodies, joints and actuators only."""

        def _reward(self, state, action, next_state):
            return torch.zeros(self.num_envs)

    return Probe


def _body_error(env, model, mujoco) -> float:
    import newton
    import warp as wp

    data = mujoco.MjData(model)
    rng = np.random.default_rng(0)
    worst = 0.0
    for _ in range(N_DRAWS):
        qpos, _ = random_state(model, rng)
        data.qpos[:] = qpos
        mujoco.mj_kinematics(model, data)
        joint_q, joint_qd = env.joint_state_from_mujoco(
            torch.tensor(qpos)[None].float(), torch.zeros(1, model.nv)
        )
        state = env.simulation.model.state()
        newton.eval_fk(env.simulation.model, wp.array(joint_q[0].numpy()),
                       wp.array(joint_qd[0].numpy()), state)  # fmt: skip
        positions = state.body_q.numpy()[:, :3]
        for body, index in _same_bodies(env, model):
            worst = max(worst, float(np.abs(positions[index] - data.xpos[body]).max()))
    return worst


def _same_bodies(env, model) -> list[tuple[int, int]]:
    """(MuJoCo body, Newton body) pairs: in order where the counts and names agree, else by
    name (a body split into joint frames adds Newton bodies named ``<body>:<joint>``;
    Newton imports sibling ``<frame>``s last to first)."""
    from pathgrad.envs.newton.engine.kinematics import newton_label

    labels = [str(label).rsplit("/", 1)[-1] for label in env.body_labels]
    names = [newton_label(model.body(body).name) for body in range(1, model.nbody)]
    if len(labels) == model.nbody - 1 and all(
        not name or name == label for name, label in zip(names, labels, strict=True)
    ):
        return [(body, body - 1) for body in range(1, model.nbody)]
    index = {label: k for k, label in enumerate(labels)}
    return [(body + 1, index[name]) for body, name in enumerate(names) if name in index]


def _applied(mujoco) -> tuple[int, ...]:
    """The transmissions of the actuators pathgrad applies: joints (hinges and slides, named
    by ``joint`` or ``jointinparent``) and fixed tendons."""
    kinds = mujoco.mjtTrn
    return int(kinds.mjTRN_JOINT), int(kinds.mjTRN_JOINTINPARENT), int(kinds.mjTRN_TENDON)


def _without_what_is_named(model, mujoco):
    """The MuJoCo model without what the env's notes name as left out: equality constraints,
    tendon limits (joint limits too: the state is inside the ranges), fluid forces, ball and
    free joints' friction loss, actuators of sites and bodies (a copy)."""
    bare = copy.deepcopy(model)
    bare.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_EQUALITY
    bare.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_LIMIT
    bare.opt.density = bare.opt.viscosity = 0.0
    for actuator in range(bare.nu):  # an actuator of a site or a body: not applied (named)
        if int(bare.actuator_trntype[actuator]) not in _applied(mujoco):
            bare.actuator_gainprm[actuator] = 0.0
            bare.actuator_biasprm[actuator] = 0.0
    free, ball = int(mujoco.mjtJoint.mjJNT_FREE), int(mujoco.mjtJoint.mjJNT_BALL)
    for joint in range(bare.njnt):
        kind = int(bare.jnt_type[joint])
        if kind in (free, ball):
            start, count = int(bare.jnt_dofadr[joint]), (6 if kind == free else 3)
            bare.dof_frictionloss[start : start + count] = 0.0
    return bare


def _acceleration_error(probe, path: Path, model, mujoco) -> tuple[float, int]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # mj_forward's qacc is the explicit acceleration: no implicit damping in the step
        env = probe(1, model_file=str(path), dt=STEP, capture=False, implicit_damping=False)
    model.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_CONTACT
    data = mujoco.MjData(model)
    rng = np.random.default_rng(2)
    qpos, qvel = inside_the_ranges(model, rng), 0.3 * rng.standard_normal(model.nv)
    low, high = model.actuator_ctrlrange[:, 0], model.actuator_ctrlrange[:, 1]
    ctrl = np.where(model.actuator_ctrllimited.astype(bool),
                    low + (high - low) * rng.uniform(0.2, 0.8, model.nu),
                    rng.uniform(-1.0, 1.0, model.nu))  # fmt: skip
    data.qpos[:], data.qvel[:], data.ctrl[:] = qpos, qvel, ctrl
    mujoco.mj_forward(model, data)
    env.reset(seed=0)
    joint_q, joint_qd = env.joint_state_from_mujoco(
        torch.tensor(qpos)[None].float(), torch.tensor(qvel)[None].float()
    )
    env.state = {**env.state, "joint_q": joint_q, "joint_qd": joint_qd}
    applied = [a for a in range(model.nu) if int(model.actuator_trntype[a]) in _applied(mujoco)]
    if read_mjcf_motors(path)[0]:  # the actions are the file's joint and tendon actuators
        action = torch.tensor(ctrl[applied])[None].float()
    else:  # the actions drive every joint (said): MuJoCo's actuators push, these do not
        action = torch.zeros(1, env.action_dim)
    env.step(action)
    _, after = env.mujoco_from_joint_state(env.state["joint_q"], env.state["joint_qd"])
    qacc = (after[0].double().numpy() - qvel) / STEP
    scale = max(1.0, float(np.abs(data.qacc).max()))
    return float(np.abs(qacc - data.qacc).max()) / scale, env.action_dim


def survey(path: Path) -> tuple[list[str], list[str]]:
    """One table row for ``path`` and the env's notes at construction."""
    import mujoco

    probe = _probe_class()
    try:
        model = mujoco.MjModel.from_xml_path(str(path))
    except Exception as error:  # noqa: BLE001 - a file MuJoCo rejects is reported, not raised
        return [path.name, "MuJoCo rejects it", str(error).splitlines()[0][:120], "", "", ""], []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            env = probe(1, model_file=str(path), capture=False)
    except Exception as error:  # noqa: BLE001 - the load error is the result
        return [path.name, "does not load", str(error).splitlines()[0][:160], "", "", ""], []
    notes = [str(w.message).replace("\n", " ") for w in caught]
    try:  # a qpos of another size than MuJoCo's (a joint lost) is a result, not a crash
        bodies = f"{_body_error(env, model, mujoco):.1e}"
    except Exception as error:  # noqa: BLE001
        bodies = f"failed: {str(error)[:80]}"
    try:
        relative, actions = _acceleration_error(probe, path, model, mujoco)
        bare, _ = _acceleration_error(probe, path, _without_what_is_named(model, mujoco), mujoco)
        qacc, named = f"{relative:.1e}", f"{bare:.1e}"
    except Exception as error:  # noqa: BLE001
        qacc, named, actions = f"failed: {str(error)[:80]}", "", env.action_dim
    return [path.name, "loads", bodies, qacc, named, f"{actions} / {model.nu}"], notes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", type=Path, help="MJCF files (default: Gymnasium's)")
    parser.add_argument("--notes", action="store_true", help="print each env's notes too")
    args = parser.parse_args()
    torch.set_num_threads(1)
    files = args.files or sorted(
        (Path(__import__("gymnasium").__file__).parent / "envs/mujoco/assets").glob("*.xml")
    )
    print("| file | Newton | bodies vs xpos (m) | qacc vs MuJoCo (rel.) | qacc vs MuJoCo without "
          "what is named | actions / actuators |")  # fmt: skip
    print("|---|---|---:|---:|---:|---:|")
    all_notes = []
    for path in files:
        row, notes = survey(path)
        print("| " + " | ".join(row) + " |", flush=True)
        all_notes += [f"- {path.name}: {note}" for note in notes]
    if args.notes:
        print("\n" + "\n".join(all_notes))


if __name__ == "__main__":
    main()
