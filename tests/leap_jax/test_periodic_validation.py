"""The periodic evaluation for a comparison: the validation split (what the plateau rule reads) beside
the held-out one, Acc@3 with real feedback every eval.feedback_interval steps, and the family version
in the finished record."""
from __future__ import annotations

import json

import pytest

from kernels_env.tasks.generated import CURRENT_FAMILY_VERSION, generated_task_names
from leap_jax.rollout.policy import ScriptedPolicy
from leap_jax.train.config import ConfigError, load_config
from leap_jax.train.metrics import read_metrics
from leap_jax.train.trainer import Trainer
from tests.leap_jax._trainer_helpers import OracleEvaluator
from tests.leap_jax.test_trainer import TINY, _compilation_cache  # noqa: F401 (the shared JAX cache)

GENERATED = ["tasks.source=generated", "tasks.names=[]", "tasks.generated_train=2", "tasks.generated_held_out=2",
             "tasks.generated_validation=2", "eval.interval=1", "eval.turns=1", "eval.at_start=true",
             "eval.feedback_interval=2", "eval.feedback_turns=2"]


def test_validation_split_feedback_turns_and_the_plateau_on_validation(tmp_path):
    extra = GENERATED + ["train.steps=6", "train.plateau.metric=validation/acc@1", "train.plateau.window=2",
                         "train.plateau.min_steps=3", "eval.final_turns=2"]
    cfg = load_config(None, TINY + [f"train.run_dir={tmp_path / 'r'}", *extra])
    t = Trainer(cfg, evaluator=OracleEvaluator())
    t._policy_override = ScriptedPolicy(t.tokenizer, p_good=1.0, end_ids=[t.streams.im_end])
    assert t.validation == generated_task_names(4, 0, "held_out")[2:]
    assert not set(t.validation) & set(t.held_out)
    t.train()
    t.close()
    rows = read_metrics(tmp_path / "r")
    # every evaluation has both splits; the plateau (validation flat for 2 evaluations) stops it at step 3
    assert [r["step"] for r in rows] == [-1, 0, 1, 2]
    assert all(r["validation/acc@1"] == r["heldout/acc@1"] == 1.0 for r in rows)
    # two turns of feedback at the start and every second step (steps done 0 and 2), one turn otherwise
    assert [r["step"] for r in rows if "heldout/acc@2" in r] == [-1, 1]
    assert all("validation/acc@2" in r for r in rows if "heldout/acc@2" in r)
    finished = json.loads((tmp_path / "r" / "finished.json").read_text())
    assert finished == {**finished, "reason": "plateau", "step": 3, "family_version": CURRENT_FAMILY_VERSION}
    assert "validation" not in json.loads((tmp_path / "r" / "final_eval.json").read_text())["splits"]


@pytest.mark.parametrize("bad, words", [
    (["eval.feedback_interval=3"], "eval.feedback_interval=3: expected a multiple of eval.interval=2"),
    (["eval.feedback_interval=2", "eval.interval=null"], "expected a multiple of eval.interval=None"),
    (["train.plateau.metric=validation/acc@1"], "needs a validation split"),
    (["tasks.source=generated", "tasks.names=[]", "tasks.generated_version=v0"],
     "tasks.generated_version='v0': expected one of v1, v2"),
])
def test_comparison_settings_are_checked(bad, words):
    with pytest.raises(ConfigError, match=words.replace("(", r"\(").replace(")", r"\)")):
        load_config(None, ["eval.interval=2", *bad])
