"""Compiled calls skip guard evaluation only while the watched settings stay the same."""

from __future__ import annotations

import torch

from pathgrad.compiled.guards import GuardSkipping


class _Scaled:
    def __init__(self) -> None:
        self.scale = 2.0  # a plain setting a compiled program specialises on
        self.weights = torch.ones(3)  # tensors are not settings


def _compiled(owner: _Scaled):
    torch._dynamo.reset()
    return torch.compile(lambda x: x * owner.scale, backend="eager", dynamic=False)


def test_the_first_update_and_any_after_a_changed_setting_evaluate_guards():
    owner = _Scaled()
    guards = GuardSkipping(owner)
    guards.begin_update()
    assert not guards.active
    guards.begin_update()
    assert guards.active
    owner.weights = torch.zeros(3)
    guards.begin_update()
    assert guards.active
    owner.scale = 3.0
    guards.begin_update()
    assert not guards.active
    guards.begin_update()
    assert guards.active


def test_a_changed_setting_is_seen_by_the_next_update():
    owner = _Scaled()
    guards = GuardSkipping(owner)
    call = guards.wrap(_compiled(owner))
    x = torch.ones(2)
    for _ in range(2):
        guards.begin_update()
        assert torch.equal(call(x), 2 * x)
    owner.scale = 5.0
    guards.begin_update()  # guards evaluated: the program is specialised again
    assert torch.equal(call(x), 5 * x)
    guards.begin_update()
    assert guards.active and torch.equal(call(x), 5 * x)


def test_without_the_check_a_skipped_guard_would_keep_the_old_setting():
    owner = _Scaled()
    guards = GuardSkipping(owner)
    call = guards.wrap(_compiled(owner))
    x = torch.ones(2)
    for _ in range(2):
        guards.begin_update()
        call(x)
    owner.scale = 5.0  # changed within an update whose calls skip guards
    assert guards.active and torch.equal(call(x), 2 * x)  # why updates re-check settings
