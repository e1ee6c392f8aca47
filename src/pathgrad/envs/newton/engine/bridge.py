"""The autograd bridge between torch and a Newton simulation.

One env step is one :class:`torch.autograd.Function`: joint positions,
velocities and generalized forces (torch, ``[N, ...]``) go in, the joint
positions and velocities after ``substeps`` solver steps come out, copied out
of Warp's memory. Backward differentiates each substep in reverse order under a
``wp.Tape``, from its saved input: the solver's shared buffers (Featherstone
keeps its mass matrix and Cholesky factors on the solver object,
NVIDIA/warp#260) then hold the values of the substep being differentiated.
What the forward pass computed is kept and put back rather than computed again
(the same gradients, bit for bit): the contact set it detected
(:mod:`~pathgrad.envs.newton.engine.saved_arrays`; collision detection is not
differentiated) and, for Featherstone, every intermediate its adjoint reads,
under a tape recorded once (:mod:`~pathgrad.envs.newton.engine.kept_intermediates`).
``keep_contacts=False`` and ``keep_intermediates=False`` recompute them instead,
for less memory.

Every Warp operation works on buffers allocated once, so the forward step, one
substep's adjoint and the zeroing of its adjoints are each captured once as a
Warp graph and replayed (``capture=True``; on the CPU Warp replays a graph in
C++, without the Python cost of every kernel launch). Torch reads and writes
those buffers through shared views.

Solvers: ``featherstone`` integrates joint coordinates, which are the state
carried between steps. ``semi_implicit`` integrates maximal coordinates (body
poses and twists; joints are stiff springs), so the body state is carried
instead and the joint coordinates of the step's result are computed from it by
Newton's inverse kinematics, inside the same autograd function.

Newton 1.8's Featherstone converts the external (contact) wrenches in place
(``eval_rigid_tau``) and its adjoint reads the converted ones, which broke the
gradients with respect to positions in contact; every taped substep gets the
wrenches back (:func:`restore_external_forces`) before it is backpropagated.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import newton
import torch
import warp as wp

from pathgrad.envs.newton.engine.contact_signal import ContactSignal
from pathgrad.envs.newton.engine.inertia_adjoint import replace_tile_adjoints
from pathgrad.envs.newton.engine.kept_intermediates import KeptIntermediates, keep_intermediates
from pathgrad.envs.newton.engine.rigid_id_adjoint import (
    covers_joint_types,
    replace_rigid_id_adjoints,
)
from pathgrad.envs.newton.engine.saved_arrays import SavedArrays, contact_detection_arrays
from pathgrad.envs.newton.engine.step_functions import NewtonBodyStep, NewtonStep
from pathgrad.envs.newton.engine.turning_normals import TurningNormals
from pathgrad.envs.newton.engine.warp_graphs import (
    restore_external_forces,
    run_captured,
    torch_ordered_stream,
)

__all__ = [
    "SOLVERS",
    "NewtonBodyStep",
    "NewtonSimulation",
    "NewtonStep",
    "restore_external_forces",
    "run_captured",
    "torch_ordered_stream",
]

SOLVERS = ("featherstone", "semi_implicit")


def _view(array: Any) -> torch.Tensor:
    """A torch tensor sharing ``array``'s memory (never a grad-requiring leaf)."""
    return wp.to_torch(array, requires_grad=False)


@wp.kernel(enable_backward=False)
def _record_contact_peak(count: wp.array(dtype=wp.int32), peak: wp.array(dtype=wp.int32)):
    """``peak`` keeps the most contacts any substep's detection found (kept or dropped)."""
    wp.atomic_max(peak, 0, count[0])


class NewtonSimulation:
    """A finalized Newton model with its solver and the buffers one step needs.

    Args:
        model: A ``newton.Model`` finalized with ``requires_grad=True``.
        solver: ``featherstone`` (joint coordinates carried) or ``semi_implicit``
            (body coordinates carried, joint coordinates computed from them).
        substeps: Solver steps per env step.
        dt: Duration of one env step (s); each substep lasts ``dt / substeps``.
        contacts: Detect contacts before every substep (ground, self-collision).
        solver_options: Keyword arguments of the solver's constructor
            (Featherstone's ``use_tile_gemm`` defaults to true).
        contacts_per_shape_pair: Contact capacity per shape pair that may
            collide (``None``: Newton's estimate). The contact kernels run
            over the whole capacity, so a robot whose pairs make at most two
            contacts (capsules and spheres on a plane) steps faster with 2;
            a step that needs more drops contacts (:meth:`contact_overflow`).
        contact_signal_frame: Frame of the contact signal (Featherstone with
            contacts): ``world_origin`` (dflex's, AHAC's) or ``body``
            (:mod:`pathgrad.envs.newton.engine.contact_signal`).
        capture: Replay the step's Warp operations as captured graphs (same
            results, bit for bit; ``False`` launches every kernel from Python).
        keep_contacts: Keep each forward substep's contacts for the backward
            pass instead of detecting them again (same gradients, bit for bit;
            :mod:`pathgrad.envs.newton.engine.saved_arrays`, memory per env step
            ``substeps x`` ``saved_contacts.bytes_per_slot``).
        keep_intermediates: Featherstone: keep every intermediate of each forward
            substep that its adjoint reads, so that the backward pass computes
            nothing again (same gradients, bit for bit;
            :mod:`pathgrad.envs.newton.engine.kept_intermediates`).
    """

    def __init__(
        self,
        model: Any,
        *,
        solver: str = "featherstone",
        substeps: int = 1,
        dt: float,
        contacts: bool = False,
        solver_options: dict[str, Any] | None = None,
        capture: bool = True,
        contacts_per_shape_pair: int | None = None,
        contact_signal_frame: str = "world_origin",
        keep_contacts: bool = True,
        keep_intermediates: bool = False,
    ) -> None:
        if solver not in SOLVERS:
            raise ValueError(f"solver must be one of {list(SOLVERS)}, got '{solver}'.")
        if int(substeps) <= 0:
            raise ValueError(f"substeps must be positive, got {substeps}.")
        if not dt > 0.0:
            raise ValueError(f"dt must be positive, got {dt}.")
        self.model = model
        self.substeps = int(substeps)
        self.substep_dt = float(dt) / self.substeps
        self.uses_contacts = bool(contacts)
        self.capture = bool(capture)
        self.maximal = solver == "semi_implicit"
        if self.maximal:
            self.solver = newton.solvers.SolverSemiImplicit(model, **(solver_options or {}))
        else:  # tiled mass-matrix products: 25% faster on the cart-pole, 4-6x on the Ant (CPU)
            options = {"use_tile_gemm": True, **(solver_options or {})}
            self.solver = newton.solvers.SolverFeatherstone(model, **options)
        self.coordinates = int(model.joint_coord_count)
        self.dofs = int(model.joint_dof_count)
        # Forward: one state per substep boundary. Backward: one reusable pair.
        self._states = [model.state(requires_grad=False) for _ in range(self.substeps + 1)]
        self._control = model.control(requires_grad=False)
        self._backward_in = model.state(requires_grad=True)
        self._backward_out = model.state(requires_grad=True)
        self._backward_control = model.control(requires_grad=True)
        self._collision = None
        self._contacts = None
        if self.uses_contacts:  # Newton's default pipeline (broad phase over explicit pairs)
            capacity = None
            if contacts_per_shape_pair is not None:
                if int(contacts_per_shape_pair) <= 0:
                    raise ValueError(
                        f"contacts_per_shape_pair must be positive, got {contacts_per_shape_pair}."
                    )
                capacity = max(1, int(model.shape_contact_pair_count) * contacts_per_shape_pair)
            self._collision = newton.CollisionPipeline(
                model, broad_phase="explicit", rigid_contact_max=capacity
            )
            self._contacts = self._collision.contacts()
            self.contact_capacity = int(self._contacts.rigid_contact_max)
            self._contact_peak = wp.zeros(1, dtype=wp.int32, device=model.device)
        self.saved_contacts: SavedArrays | None = None
        if self.uses_contacts and keep_contacts:
            arrays = contact_detection_arrays(self._contacts)
            self.saved_contacts = SavedArrays(arrays, self.substeps)
        # Normals between curved shapes that turn with the bodies on the tape (None: no pair,
        # or contacts detected again on the tape). After the saved contacts: they keep the
        # arrays detection writes, the normals too.
        self.turning_normals = None
        if self.saved_contacts is not None:
            self.turning_normals = TurningNormals.for_model(model, self._contacts, self.maximal)
        # Per-body contact wrenches and accelerations of every forward step (Featherstone).
        self.contact_signal: ContactSignal | None = None
        if self.uses_contacts and not self.maximal:
            self.contact_signal = ContactSignal(
                model, self.solver, self.substeps, dt, frame=contact_signal_frame
            )
        self._tape: Any = None
        # Each substep's intermediates, kept for its adjoint (set up at the first step).
        self._keep_requested = bool(keep_intermediates) and not self.maximal
        self.kept: dict[Any, KeptIntermediates] | None = None
        self._kept_tapes: dict[Any, Any] = {}
        self._variant_key: Any = None
        self._graphs: dict[str, Any] = {}
        # CPU: the mass matrix's adjoint by inertia_adjoint (Warp's tile adjoint is 3-8x slower)
        self.written_out_inertia_adjoint = bool(model.device.is_cpu)
        # CPU: inverse dynamics differentiated from rigid_id_adjoint's lighter kernel
        self.light_rigid_id_adjoint = bool(model.device.is_cpu) and covers_joint_types(model)
        self._stream = torch_ordered_stream(model.device)
        # Torch views (flat) of the buffers torch reads and writes; x and v are the
        # carried coordinates (joint ones, or body ones for semi_implicit).
        self._x = [_view(self._position(state)).reshape(-1) for state in self._states]
        self._v = [_view(self._velocity(state)).reshape(-1) for state in self._states]
        self._final_q = _view(self._states[-1].joint_q)
        self._final_qd = _view(self._states[-1].joint_qd)
        self._f = _view(self._control.joint_f)
        backward_in, backward_out = self._backward_in, self._backward_out
        self._backward_x = _view(self._position(backward_in)).reshape(-1)
        self._backward_v = _view(self._velocity(backward_in)).reshape(-1)
        self._backward_f = _view(self._backward_control.joint_f)
        self._grad_out_x = _view(self._position(backward_out).grad).reshape(-1)
        self._grad_out_v = _view(self._velocity(backward_out).grad).reshape(-1)
        self._grad_in_x = _view(self._position(backward_in).grad).reshape(-1)
        self._grad_in_v = _view(self._velocity(backward_in).grad).reshape(-1)
        self._grad_f = _view(self._backward_control.joint_f.grad)
        if self.maximal:  # the inverse kinematics' own state, differentiated after the step
            self._kinematics = kinematics = model.state(requires_grad=True)
            self._kinematics_x = _view(kinematics.body_q).reshape(-1)
            self._kinematics_v = _view(kinematics.body_qd).reshape(-1)
            self._grad_kinematics_q = _view(kinematics.joint_q.grad)
            self._grad_kinematics_qd = _view(kinematics.joint_qd.grad)
            self._grad_kinematics_x = _view(kinematics.body_q.grad).reshape(-1)
            self._grad_kinematics_v = _view(kinematics.body_qd.grad).reshape(-1)
            self._kinematics_tape: Any = None
            self._initial = initial = model.state(requires_grad=False)  # forward kinematics
            self._initial_q, self._initial_qd = _view(initial.joint_q), _view(initial.joint_qd)
            self._initial_x = _view(initial.body_q).reshape(-1)
            self._initial_v = _view(initial.body_qd).reshape(-1)

    def _position(self, state: Any) -> Any:
        return state.body_q if self.maximal else state.joint_q

    def _velocity(self, state: Any) -> Any:
        return state.body_qd if self.maximal else state.joint_qd

    # Warp operations on the fixed buffers ------------------------------------------------

    def _run(self, name: str, operations: Callable[[], None]) -> None:
        run_captured(self._graphs, name, operations, self.model.device, self._stream, self.capture)

    def _prepare(self, state: Any) -> None:
        """Clear ``state``'s forces and bring its bodies up to date with its joints."""
        state.clear_forces()
        if self.uses_contacts and not self.maximal:  # collision detection reads body poses
            newton.eval_fk(self.model, state.joint_q, state.joint_qd, state)

    def _prepare_backward(self) -> None:
        """Clear ``_backward_in``'s forces; put back its substep's contacts where kept."""
        if self.saved_contacts is None:
            self._prepare(self._backward_in)
        else:  # the bodies' poses are the solver's own first step (FK from joint_q)
            self._backward_in.clear_forces()
            self.saved_contacts.restore()

    def _substep(self, state_in: Any, state_out: Any, control: Any, detect: bool = True) -> None:
        """One solver step; ``detect``: detect the contacts first (else use those held)."""
        if self._contacts is not None and detect:
            self._collision.collide(state_in, self._contacts)
        if self.turning_normals is not None:  # the backward buffers are the taped ones
            self.turning_normals.apply(state_in, differentiated=state_in is self._backward_in)
        self.solver.step(state_in, state_out, control, self._contacts, self.substep_dt)

    def _step_operations(self) -> None:
        """All substeps of one env step, from ``_states[0]`` to ``_states[-1]``."""
        self._prepare(self._states[0])
        signal = self.contact_signal
        if signal is not None:
            signal.start()
        for k in range(self.substeps):
            if k > 0:
                self._states[k].clear_forces()
            self._substep(self._states[k], self._states[k + 1], self._control)
            self._after_substep(k)
            if self._contacts is not None:
                wp.launch(
                    _record_contact_peak,
                    dim=1,
                    inputs=[self._contacts.rigid_contact_count, self._contact_peak],
                    device=self.model.device,
                )
            if signal is not None:
                signal.add_substep(self._states[k], self._control)
        if signal is not None:
            signal.finish()
        if self.maximal:
            final = self._states[-1]
            newton.eval_ik(self.model, final, final.joint_q, final.joint_qd)

    def _after_substep(self, k: int) -> None:
        """Warp operations after forward substep ``k``: keep what the backward pass reuses."""
        if self.saved_contacts is not None:
            self.saved_contacts.save(k)
        if self.kept is not None:
            self.kept[self._variant_of(k)].save(k)

    # Tape variants: substeps that run different kernels (a mass matrix evaluated or held).
    def _variants(self) -> list[Any]:
        return [None]

    def _variant_of(self, k: int) -> Any:
        return None

    def _set_variant(self, key: Any) -> None:
        self._variant_key = key

    def _kept_elsewhere(self) -> tuple[Any, ...]:
        """Arrays a subclass keeps or evaluates again itself (not kept per substep)."""
        return () if self.turning_normals is None else self.turning_normals.own_arrays()

    def _forward_kinematics_operations(self) -> None:
        initial = self._initial
        newton.eval_fk(self.model, initial.joint_q, initial.joint_qd, initial)

    def _kinematics_adjoint_operations(self) -> None:
        """Inverse kinematics of ``_kinematics``'s bodies, backpropagated (joint adjoints set)."""
        state = self._kinematics
        self._kinematics_tape = wp.Tape()
        with self._kinematics_tape:
            newton.eval_ik(self.model, state, state.joint_q, state.joint_qd)
        self._kinematics_tape.backward()

    def _zero_kinematics_adjoint_operations(self) -> None:
        """Zero every adjoint the last inverse-kinematics backpropagation wrote."""
        self._kinematics_tape.zero()
        state = self._kinematics
        for array in (state.body_q, state.body_qd, state.joint_q, state.joint_qd):
            array.grad.zero_()

    def _adjoint_operations(self) -> None:
        """One substep backpropagated (output adjoints set): its kept intermediates put back
        under the tape recorded once, or the substep recomputed under a new tape."""
        self._prepare_backward()
        if self.kept is not None:
            self.kept[self._variant_key].restore()
            if self.turning_normals is not None:  # its own poses, not kept: evaluated again
                self.turning_normals.apply(self._backward_in)
            self._tape = self._kept_tapes[self._variant_key]
        else:
            self._tape = wp.Tape()
            with self._tape:
                self._substep(
                    self._backward_in,
                    self._backward_out,
                    self._backward_control,
                    detect=self.saved_contacts is None,
                )
        if not self.maximal:
            restore_external_forces(self._backward_out)
            if self.light_rigid_id_adjoint:
                replace_rigid_id_adjoints(self._tape)
            if self.written_out_inertia_adjoint:
                replace_tile_adjoints(self._tape)
        self._tape.backward()

    def _zero_adjoint_operations(self) -> None:
        """Zero every adjoint the last backpropagation wrote."""
        self._tape.zero()
        for state in (self._backward_in, self._backward_out):
            for array in (state.joint_q, state.joint_qd, state.body_q, state.body_qd):
                if array is not None and array.grad is not None:
                    array.grad.zero_()
        self._backward_control.joint_f.grad.zero_()
        if self.turning_normals is not None:
            self.turning_normals.zero_adjoints()

    # Torch side ------------------------------------------------------------------------

    def forward(
        self,
        position: torch.Tensor,
        velocity: torch.Tensor,
        joint_f: torch.Tensor,
        keep_inputs: bool = True,
    ) -> tuple[torch.Tensor, ...]:
        """Step without a tape from the carried coordinates.

        Returns the carried position and velocity after the step, for
        ``semi_implicit`` also the joint coordinates computed from them, and
        last each substep's input for the backward pass: position, velocity,
        the contacts kept (``None`` where none are) and the intermediates kept
        (``(variant, row)``, ``None`` where none are); an empty list
        without ``keep_inputs`` (no backward pass will follow).
        """
        if self._keep_requested:  # once, before the step's graph is captured
            self._keep_requested = False
            found = keep_intermediates(self)
            if found is not None:
                self.kept, self._kept_tapes = found
        self._x[0].copy_(position.detach().reshape(-1))
        self._v[0].copy_(velocity.detach().reshape(-1))
        self._f.copy_(joint_f.detach().reshape(-1))
        self._run("step", self._step_operations)
        x_final, v_final = self._x[-1].clone(), self._v[-1].clone()
        inputs = self._substep_inputs(position, velocity) if keep_inputs else []
        if self.maximal:
            return x_final, v_final, self._final_q.clone(), self._final_qd.clone(), inputs
        return x_final, v_final, inputs

    def _substep_inputs(
        self, position: torch.Tensor, velocity: torch.Tensor
    ) -> list[tuple[torch.Tensor | None, ...]]:
        """Each substep's input of the last forward step: position, velocity, contacts."""
        states = [(position.detach().reshape(-1), velocity.detach().reshape(-1))]
        states += [
            (x.clone(), v.clone()) for x, v in zip(self._x[1:-1], self._v[1:-1], strict=True)
        ]
        saved = self.saved_contacts
        contacts = [None] * self.substeps if saved is None else list(saved.rows())
        kept: list[Any] = [None] * self.substeps
        if self.kept is not None:
            rows = {key: store.rows() for key, store in self.kept.items()}
            keys = [self._variant_of(k) for k in range(self.substeps)]
            kept = [(key, self.kept[key].row(rows[key], k)) for k, key in enumerate(keys)]
        return [(x, v, c, r) for (x, v), c, r in zip(states, contacts, kept, strict=True)]

    def _load_backward_input(self, substep_input: tuple[torch.Tensor | None, ...]) -> None:
        """Copy one substep's saved input (position, velocity, contacts, intermediates) into
        place."""
        x_in, v_in, contacts_in, kept_in = substep_input[:4]
        self._backward_x.copy_(x_in)
        self._backward_v.copy_(v_in)
        if contacts_in is not None and self.saved_contacts is not None:
            self.saved_contacts.load(contacts_in)
        if kept_in is not None and self.kept is not None:
            key, row = kept_in
            self.kept[key].load(row)
            self._set_variant(key)

    def contact_overflow(self) -> int | None:
        """The most contacts one forward substep has needed, when more than fit; else ``None``.

        Contacts past :attr:`contact_capacity` are dropped by Newton (and
        announced by a line from its kernel on every such substep). Reading
        this synchronises with the device.
        """
        if self._contacts is None:
            return None
        peak = int(self._contact_peak.numpy()[0])
        return peak if peak > self.contact_capacity else None

    def contact_info(self, num_envs: int) -> dict[str, torch.Tensor]:
        """The last forward step's ``contact_forces`` and ``accelerations`` (none without)."""
        if self.contact_signal is None:
            return {}
        return self.contact_signal.read(self._states[0], self._states[-1], num_envs)

    def body_coordinates(
        self, joint_q: torch.Tensor, joint_qd: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Body poses and twists (flat) of every world's joint coordinates (``semi_implicit``)."""
        self._initial_q.copy_(joint_q.detach().reshape(-1))
        self._initial_qd.copy_(joint_qd.detach().reshape(-1))
        self._run("forward_kinematics", self._forward_kinematics_operations)
        return self._initial_x.clone(), self._initial_v.clone()

    def backward(
        self,
        inputs: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]],
        joint_f: torch.Tensor,
        grad_x: torch.Tensor,
        grad_v: torch.Tensor,
        joint_adjoints: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Adjoints of the step's inputs from those of its outputs, substep by substep.

        ``joint_adjoints`` (``semi_implicit``): the final body position and
        velocity and the adjoints of the joint coordinates computed from them.
        """
        grad_x, grad_v = grad_x.reshape(-1), grad_v.reshape(-1)
        if joint_adjoints is not None:
            x_final, v_final, grad_q, grad_qd = joint_adjoints
            self._kinematics_x.copy_(x_final)
            self._kinematics_v.copy_(v_final)
            self._grad_kinematics_q.copy_(grad_q.reshape(-1))
            self._grad_kinematics_qd.copy_(grad_qd.reshape(-1))
            self._run("kinematics_adjoint", self._kinematics_adjoint_operations)
            grad_x = grad_x + self._grad_kinematics_x
            grad_v = grad_v + self._grad_kinematics_v
            self._run("zero_kinematics_adjoint", self._zero_kinematics_adjoint_operations)
        self._backward_f.copy_(joint_f.detach().reshape(-1))
        grad_f = torch.zeros(self.dofs, dtype=grad_x.dtype, device=grad_x.device)
        for substep_input in reversed(inputs):
            self._load_backward_input(substep_input)
            self._grad_out_x.copy_(grad_x)
            self._grad_out_v.copy_(grad_v)
            self._run("adjoint", self._adjoint_operations)
            grad_x, grad_v = self._grad_in_x.clone(), self._grad_in_v.clone()
            grad_f = grad_f + self._grad_f
            self._run("zero_adjoint", self._zero_adjoint_operations)
        return grad_x, grad_v, grad_f
