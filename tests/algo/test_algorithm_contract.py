"""The algorithm contract: the trainer's phases, building from a config, what compiles."""

from __future__ import annotations

import pytest

from pathgrad.algo import APG, SAPO, SHAC, APGCfg, BaseAlgorithm, build_algo
from pathgrad.algo.ahac import AHAC
from pathgrad.algo.ahac_stiffness import StiffnessAHAC
from pathgrad.algo.sapo_ensemble import SAPOEnsemble
from pathgrad.compiled.blockers import compiled_update_blockers
from pathgrad.envs import PointMass
from pathgrad.policies import GaussianMLPPolicy

PHASES = [
    "begin_update",
    "accumulate_segment",
    "accumulate_complete_rollout",
    "accumulate_complete_returns",
    "finish_update",
    "cancel_update",
]


def test_the_trainers_phases_are_the_abstract_contract():
    assert set(BaseAlgorithm.__abstractmethods__) == set(PHASES)

    class WithoutCancel(BaseAlgorithm):
        def begin_update(self): ...
        def accumulate_segment(self, rollout): ...
        def accumulate_complete_rollout(self, rollout, **kwargs): ...
        def accumulate_complete_returns(self, returns, entropy_returns, **kwargs): ...
        def finish_update(self): ...

    with pytest.raises(TypeError, match="cancel_update"):
        WithoutCancel()


def test_update_runs_the_phases_and_cancels_on_an_error():
    calls = []

    class Recording(BaseAlgorithm):
        def begin_update(self):
            calls.append("begin")

        def accumulate_segment(self, rollout):
            calls.append("segment")
            if rollout == "bad":
                raise ValueError("bad rollout")

        def accumulate_complete_rollout(self, rollout, **kwargs): ...
        def accumulate_complete_returns(self, returns, entropy_returns, **kwargs): ...

        def finish_update(self):
            calls.append("finish")
            return {"loss": 1.0}

        def cancel_update(self):
            calls.append("cancel")

    assert Recording().update("good") == {"loss": 1.0}
    with pytest.raises(ValueError, match="bad rollout"):
        Recording().update("bad")
    assert calls == ["begin", "segment", "finish", "begin", "segment", "cancel"]


def test_each_algorithm_builds_itself_from_its_config_and_the_env():
    env = PointMass(2, max_episode_steps=5, seed=0)
    built = [("apg", APG), ("shac", SHAC), ("sapo", SAPO), ("sapo_ensemble", SAPOEnsemble),
             ("ahac_stiffness", StiffnessAHAC)]  # fmt: skip
    for name, kind in built:
        algorithm = build_algo(name, {}, GaussianMLPPolicy(6, 2), "cpu", env=env)
        assert type(algorithm) is kind and algorithm.algorithm_name == name
    assert build_algo("sapo", {}, GaussianMLPPolicy(6, 2), "cpu", env=env).target_entropy == -1.0
    for name in ("shac", "sapo", "sapo_ensemble", "ahac", "ahac_stiffness"):
        with pytest.raises(ValueError, match=f"'{name}' needs env="):
            build_algo(name, {}, GaussianMLPPolicy(6, 2), "cpu")
    with pytest.raises(ValueError, match="'ahac' needs contact forces from the env"):
        build_algo("ahac", {}, GaussianMLPPolicy(6, 2), "cpu", env=env)


def test_what_compiles_is_declared_by_each_class_and_not_inherited():
    declared = (APG.compiled_update, SHAC.compiled_update, SAPO.compiled_update)
    assert declared == ("apg", "critic", "critic")
    for kind in (AHAC, SAPOEnsemble, StiffnessAHAC):
        assert kind.compiled_update is None

    class MyAPG(APG):  # a subclass changes the update: compiled only where it says so
        pass

    assert MyAPG.compiled_update is None and MyAPG.algorithm_name == ""
    assert "AHAC reads info['contact_forces', 'accelerations']" in AHAC.compile_blocker

    class Collector:
        needs_step_hooks = False

    policy = GaussianMLPPolicy(6, 2)
    mine = MyAPG(APGCfg(), policy)
    reasons = compiled_update_blockers(mine, PointMass(2, seed=0), policy, Collector(), "segmented")
    assert reasons == [
        "the algorithm is MyAPG, which declares no compiled_update (APG, SHAC and SAPO do)"
    ]
    apg = APG(APGCfg(optimizer={"name": "sgd", "learning_rate": 0.1}), policy)
    reasons = compiled_update_blockers(apg, PointMass(2, seed=0), policy, Collector(), "segmented")
    assert reasons == ["the optimizer is SGD, not Adam or AdamW"]
    shac = build_algo("shac", {}, policy, "cpu", env=PointMass(2, seed=0))
    assert [label for _, label in shac.compiled_optimizers()] == [
        "the optimizer",
        "the critic optimizer",
    ]
    assert shac.compiled_optimizers()[1][0] is shac.critic_optimizer
