"""One step's Jacobian through body-to-body contact, shape pair by shape pair, against central
differences in sustained contact.

Two bodies on x/y slides, without gravity or friction, start 2 mm into each other and off
centre in y; the first (motors on its slides) pushes the second. Newton detects contacts
outside the tape and holds each contact's world normal fixed in its contact force; between
two curved surfaces (sphere, capsule, cylinder side) that missed how the normal turns as the
bodies move, 8-20% of this Jacobian, which
:mod:`pathgrad.envs.newton.engine.turning_normals` puts back. The step of the differences
is small (3e-5 m; 1e-5 for a capsule on a cylinder's rims) because the map curves within
millimetres of penetration (at 1e-3 the differences themselves are 9% off between two
spheres); below it a mesh's contact set starts to switch. Not checked: two meshes, whose
contact set Newton makes erratic (normals off the faces, counts that change with the step),
and a mesh on a cylinder (27% off, not yet understood).
"""

from __future__ import annotations

import warnings

import pytest
import torch

pytest.importorskip("newton", reason="the Newton backend needs pathgrad[newton]")

from pathgrad.envs.newton import NewtonEnv  # noqa: E402
from pathgrad.testing.jacobians import finite_differences, jacobians  # noqa: E402

GEOMS = {
    "sphere": 'type="sphere" size="0.05"',
    "capsule": 'type="capsule" size="0.03 0.05"',  # its axis along z, the slides' normal
    "box": 'type="box" size="0.05 0.05 0.05"',
    "cylinder": 'type="cylinder" size="0.05 0.05"',
    "mesh": 'type="mesh" mesh="cube"',
}
HALF_WIDTH = {"sphere": 0.05, "capsule": 0.03, "box": 0.05, "cylinder": 0.05, "mesh": 0.05}
FACE_PAIRS = [("sphere", "box"), ("capsule", "box"), ("box", "box"), ("box", "cylinder"),
              ("capsule", "mesh"), ("box", "mesh")]  # fmt: skip
CURVED_PAIRS = [("sphere", "sphere"), ("sphere", "capsule"), ("capsule", "capsule"),
                ("capsule", "cylinder"), ("cylinder", "cylinder")]  # fmt: skip
SMALLER_STEP = {("capsule", "cylinder"): 1e-5}
CUBE = " ".join(f"{x} {y} {z}" for z in (-0.05, 0.05) for x, y in
                ((-0.05, -0.05), (0.05, -0.05), (0.05, 0.05), (-0.05, 0.05)))  # fmt: skip


def pair_file(first: str, second: str) -> str:
    return f"""<mujoco><option gravity="0 0 0"/>
<asset><mesh name="cube" vertex="{CUBE}"/></asset>
<worldbody>
 <body name="pusher" pos="0 0 1">
  <joint name="px" type="slide" axis="1 0 0"/><joint name="py" type="slide" axis="0 1 0"/>
  <geom {GEOMS[first]} mass="1" friction="0 0 0"/>
 </body>
 <body name="object" pos="0 0 1">
  <joint name="ox" type="slide" axis="1 0 0"/><joint name="oy" type="slide" axis="0 1 0"/>
  <geom {GEOMS[second]} mass="0.5" friction="0 0 0"/>
 </body>
</worldbody>
<actuator><motor joint="px" gear="10"/><motor joint="py" gear="10"/></actuator></mujoco>"""


class TwoBodies(NewtonEnv):
    observation_dim = 8
    contact_softness = "newton"  # the constants (2500, 100 on every shape) these were sized for

    def _reward(self, state, action, next_state):
        return next_state["joint_q"][:, 2]


def disagreement(object_after, start: tuple[torch.Tensor, ...], eps: float) -> float:
    """|J - J_fd| / |J_fd| of ``object_after`` at ``start`` (its only output)."""
    leaves = tuple(x.clone().requires_grad_() for x in start)
    (analytic,) = jacobians(lambda *inputs: (object_after(*inputs),), leaves)
    (numeric,) = finite_differences(lambda *inputs: (object_after(*inputs),), start, eps)
    assert torch.isfinite(analytic).all()
    return float((analytic - numeric).norm() / numeric.norm())


def relative_error(tmp_path, first: str, second: str, eps: float = 3e-5) -> float:
    """:func:`disagreement` of the object's position and velocity after one step (10
    substeps of 1 ms) with respect to the start positions, velocities and the action."""
    path = tmp_path / f"{first}_{second}.xml"
    path.write_text(pair_file(first, second))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no floor asked for; the mesh's flat inertia
        env = TwoBodies(1, model_file=str(path), contacts=True, dt=0.01, substeps=10)
    gap = HALF_WIDTH[first] + HALF_WIDTH[second]
    start = (torch.tensor([[-gap + 0.002, 0.01, 0.0, 0.0]]), torch.tensor([[0.5, 0.0, 0.0, 0.0]]),
             torch.tensor([[0.3, 0.05]]))  # fmt: skip

    def object_after(joint_q, joint_qd, action):
        env.state = {"joint_q": joint_q, "joint_qd": joint_qd}
        env.elapsed_steps = torch.zeros(1, dtype=torch.long)
        env.step(action)
        return torch.cat([env.state["joint_q"][0, 2:], env.state["joint_qd"][0, 2:]])

    with torch.no_grad():
        assert float(object_after(*start)[0]) > 0.002  # the object was pushed: contact held
    return disagreement(object_after, start, eps)


@pytest.mark.parametrize("pair", FACE_PAIRS + CURVED_PAIRS, ids="-".join)
def test_the_jacobian_through_contact_agrees_with_central_differences(tmp_path, pair):
    assert relative_error(tmp_path, *pair, eps=SMALLER_STEP.get(pair, 3e-5)) < 0.01


def test_without_turning_normals_two_curved_surfaces_disagree(tmp_path, monkeypatch):
    """The check fails where the normal is held fixed (what it exists to catch)."""
    from pathgrad.envs.newton.engine.turning_normals import TurningNormals

    monkeypatch.setattr(TurningNormals, "for_model", classmethod(lambda *_: None))
    assert relative_error(tmp_path, "sphere", "sphere") > 0.05


@pytest.mark.parametrize("turning", [True, False], ids=["turning", "held"])
def test_semi_implicit_turns_the_normals_from_its_carried_body_poses(tmp_path, monkeypatch,
                                                                     turning):  # fmt: skip
    """``semi_implicit`` carries body poses: the Jacobian with respect to the bodies' x and y
    and the action agrees with central differences, and does not where the normal is held
    (14% off)."""
    from pathgrad.envs.newton.engine.turning_normals import TurningNormals

    if not turning:
        monkeypatch.setattr(TurningNormals, "for_model", classmethod(lambda *_: None))
    path = tmp_path / "spheres.xml"
    path.write_text(pair_file("sphere", "sphere"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = TwoBodies(1, model_file=str(path), contacts=True, dt=0.01, substeps=10,
                        solver="semi_implicit")  # fmt: skip
    joint_q, joint_qd = torch.tensor([[-0.098, 0.01, 0.0, 0.0]]), torch.tensor([[0.5, 0, 0, 0.0]])
    body_q, body_qd = (x.view(1, -1) for x in env.simulation.body_coordinates(joint_q, joint_qd))

    def object_after(pusher_xy, object_xy, action):  # each body: x y z, then its quaternion
        poses = torch.cat([pusher_xy, body_q[:, 2:7], object_xy, body_q[:, 9:]], dim=1)
        env.state = {"joint_q": joint_q, "joint_qd": joint_qd, "body_q": poses, "body_qd": body_qd}
        env.elapsed_steps = torch.zeros(1, dtype=torch.long)
        env.step(action)
        return torch.cat([env.state["joint_q"][0, 2:], env.state["joint_qd"][0, 2:]])

    start = (body_q[:, :2], body_q[:, 7:9], torch.tensor([[0.3, 0.05]]))
    error = disagreement(object_after, start, 3e-5)
    assert error < 0.01 if turning else error > 0.05
