"""The DCP-driven multi-turn rollout with a scripted policy (known-good / known-bad suite submissions).

Checks against hand-computed outcomes and an independent NumPy statement of the DCP rule: which
groups DCP debugs, that only the active rows are generated on later turns, the conversation streams
and their masks, env_error exclusion, generation/evaluation overlap, and Acc@t / turns per pass.
"""
from __future__ import annotations

import numpy as np
import pytest

from kernels_env.core.config import EnvConfig
from kernels_env.core.status import Status
from kernels_env.tasks import get_task
from leap_jax.rollout.multiturn import (DEBUG, EASY, HOPELESS, ChatStreams, MultiTurnRollout, outcome_metrics,
                                        select_groups)
from leap_jax.rollout.policy import GenRequest, MixedPolicy, SamplerPolicy, ScriptedPolicy, bad_compile, bad_format
from leap_jax.rollout.prompts import initial_messages, task_prompt
from leap_jax.train.config import load_config
from leap_jax.train.trainer import build_tokenizer
from tests.leap_jax._trainer_helpers import OracleEvaluator

TASKS = ["relu", "sigmoid", "tanh", "silu"]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    cfg = load_config(None, ["tokenizer.vocab_size=600"])
    return build_tokenizer(cfg, tmp_path_factory.mktemp("tok"), [get_task(t) for t in TASKS])


class PlanPolicy(ScriptedPolicy):
    """Good iff (task, row index in group, turn) is in `good`; records every request per turn."""

    def __init__(self, tokenizer, good, group_size, **kw):
        super().__init__(tokenizer, **kw)
        self.good, self.G = set(good), group_size
        self.requests: dict[int, list[GenRequest]] = {}
        self.calls = 0

    def text_for(self, request, seed):
        sol = get_task(request.task).solution
        row = request.key[1] % self.G
        return sol if (request.task, row, request.turn) in self.good else bad_compile(sol)

    def generate(self, requests, seed):
        self.calls += 1
        for r in requests:
            self.requests.setdefault(r.turn, []).append(r)
        return super().generate(requests, seed)


def make_rollout(tokenizer, evaluator, G=4, T=3, mode="dcp", chunks=1, t_min=0.5, t_max=None):
    return MultiTurnRollout(ChatStreams(tokenizer), evaluator, EnvConfig(backend="cpu", sizes="small"),
                            group_size=G, max_turns=T, dcp_mode=mode, t_min=t_min, t_max=t_max,
                            feedback_budget_chars=300, max_new_tokens=64, max_context_tokens=100_000,
                            overlap_chunks=chunks, sizes="small",
                            feedback_fn=lambda res, budget: f"status: {res.status.value}. {res.message}"[:budget])


GOOD = {("relu", i, 1) for i in range(4)}                     # easy: all solve turn 1
GOOD |= {("tanh", 0, 1), ("tanh", 1, 1), ("tanh", 2, 2), ("tanh", 3, 3)}  # debug: 2 fail, fixed on t2 / t3
GOOD |= {("silu", 0, 1)}                                       # debug: 3 fail (= G-1), never fixed
# sigmoid: every row fails every turn -> 4 failures > t_max = 3: hopeless


def test_dcp_prunes_the_right_groups_and_only_active_rows_generate(tokenizer):
    policy = PlanPolicy(tokenizer, GOOD, 4, end_ids=[ChatStreams(tokenizer).im_end])
    ev = OracleEvaluator()
    out = make_rollout(tokenizer, ev).run(TASKS, policy, seed=3, step=5)
    assert out.decisions.tolist() == [EASY, HOPELESS, DEBUG, DEBUG]
    # only failed rows of debugged groups are generated on turn 2, and only still-failing ones on turn 3
    rows_t2 = sorted((r.task, r.key[1] % 4) for r in policy.requests[2])
    rows_t3 = sorted((r.task, r.key[1] % 4) for r in policy.requests[3])
    assert rows_t2 == [("silu", 1), ("silu", 2), ("silu", 3), ("tanh", 2), ("tanh", 3)]
    assert rows_t3 == [("silu", 1), ("silu", 2), ("silu", 3), ("tanh", 3)]
    assert len(ev.jobs) == 16 + 5 + 4  # every response scored once, pruned rows never
    assert [out.stats[f"rollout/gen_rows_turn{t}"] for t in (1, 2, 3)] == [16, 5, 4]
    assert out.stats["dcp/activated_groups_frac"] == 0.5
    assert out.stats["dcp/skipped_turn2_frac"] == pytest.approx(4 / 9)  # 9 failed turn 1, 5 debugged
    m = outcome_metrics(out)
    assert m["acc@1"] == pytest.approx(7 / 16)
    assert m["acc@2"] == pytest.approx(8 / 16)
    assert m["acc@3"] == pytest.approx(9 / 16)
    assert m["turns_per_pass"] == pytest.approx(25 / 9)  # 16 + 5 + 4 turns, 9 solved rows
    assert m["fast_1"] is None and m["speedup/mean_correct"] is None  # no comparable timings
    solved = {(r.task, r.index): r.solved_turn for r in out.rows}
    assert solved[("tanh", 2)] == 2 and solved[("tanh", 3)] == 3 and solved[("sigmoid", 0)] is None


def test_streams_masks_and_feedback(tokenizer):
    streams = ChatStreams(tokenizer)
    policy = PlanPolicy(tokenizer, GOOD, 4, end_ids=[streams.im_end])
    out = make_rollout(tokenizer, OracleEvaluator()).run(TASKS, policy, seed=0)
    prompt = streams.initial(initial_messages(get_task("tanh"), "small"))
    row = next(r for r in out.rows if r.task == "tanh" and r.index == 3)
    assert row.tokens[:len(prompt)] == prompt and not any(row.trainable[:len(prompt)])
    assert [t.turn for t in row.turns] == [1, 2, 3]
    assert sum(row.trainable) == sum(t.length for t in row.turns)
    for tr in row.turns:  # each turn's trainable span decodes to the scored text plus <|im_end|>
        span = row.tokens[tr.start:tr.start + tr.length]
        assert all(row.trainable[tr.start:tr.start + tr.length])
        assert set(row.turn_of[tr.start:tr.start + tr.length]) == {tr.turn}
        assert span[-1] == streams.im_end
        assert tokenizer.decode(span[:-1]) == tr.text
    text = tokenizer.decode(row.tokens)
    assert text.count("<|im_start|>assistant\n") == 3
    assert "status: compile_error" in text  # the feedback turn is in the stream, untrainable
    fb_at = text.index("status: compile_error")
    assert fb_at > len(tokenizer.decode(prompt))
    easy_row = next(r for r in out.rows if r.task == "relu")
    assert len(easy_row.turns) == 1


def test_prompt_has_signature_format_and_no_solution():
    task = get_task("tanh")
    text = task_prompt(task, "small")
    assert task.description.strip() in text
    assert task.signature_text("small") in text
    assert "```cuda" in text and "```launch" in text and "scale_kernel" in text
    cuda_body = task.solution.split("```cuda", 1)[1].split("```", 1)[0].strip()
    assert cuda_body not in text


def _numpy_dcp(correct_t1, valid, lo_frac=0.5):
    """Independent statement of DCP 4.4 with t_min = ceil(lo_frac * n_valid), t_max = n_valid - 1."""
    n_valid = valid.sum(1)
    n_fail = (valid & ~correct_t1).sum(1)
    lo = np.ceil(lo_frac * n_valid - 1e-9)
    return np.where(n_fail < lo, EASY, np.where(n_fail > n_valid - 1, HOPELESS, DEBUG))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_scripted_outcomes_follow_the_dcp_rule(tokenizer, seed):
    G, T = 4, 3
    calls = []

    class Recording(ScriptedPolicy):
        def generate(self, requests, s):
            calls.append([(r.key[1], r.turn) for r in requests])
            return super().generate(requests, s)

    policy = Recording(tokenizer, p_good=lambda task, turn: 0.4, end_ids=[ChatStreams(tokenizer).im_end])
    out = make_rollout(tokenizer, OracleEvaluator(), G=G, T=T).run(TASKS, policy, seed=seed)
    # outcomes recomputed from the texts the policy actually wrote
    ok = np.zeros((len(TASKS), G, T), bool)
    att = np.zeros((len(TASKS), G, T), bool)
    for r in out.rows:
        for tr in r.turns:
            att[r.group, r.index, tr.turn - 1] = True
            ok[r.group, r.index, tr.turn - 1] = tr.text == get_task(r.task).solution
    np.testing.assert_array_equal(ok, out.correct)
    np.testing.assert_array_equal(att, out.attempted)
    want = _numpy_dcp(ok[:, :, 0], np.ones((len(TASKS), G), bool))
    np.testing.assert_array_equal(out.decisions, want)
    for t in range(2, T + 1):  # rows asked on turn t: debugged, failed every earlier turn
        expect = sorted(g * G + i for g in range(len(TASKS)) for i in range(G)
                        if want[g] == DEBUG and not ok[g, i, :t - 1].any())
        got = sorted(k for call in calls for (k, turn) in call if turn == t)
        assert got == expect
    m = outcome_metrics(out)
    for t in range(1, T + 1):
        assert m[f"acc@{t}"] == pytest.approx(ok[:, :, :t].any(-1).mean())
    n_solved = ok.any(-1).sum()
    assert m["turns_per_pass"] == (pytest.approx(att.sum() / n_solved) if n_solved else None)


def test_all_mode_debugs_every_failed_row(tokenizer):
    policy = PlanPolicy(tokenizer, GOOD, 4, end_ids=[ChatStreams(tokenizer).im_end])
    out = make_rollout(tokenizer, OracleEvaluator(), mode="all").run(TASKS, policy, seed=0)
    assert (out.decisions == DEBUG).all()
    assert out.stats["rollout/gen_rows_turn2"] == 9  # every turn-1 failure continues
    assert out.stats["dcp/skipped_turn2_frac"] == 0.0


def test_select_groups_gives_each_split_its_own_metrics(tokenizer):
    """One rollout over two splits scores each split as a rollout of just its tasks would."""
    policy = PlanPolicy(tokenizer, GOOD, 4, end_ids=[ChatStreams(tokenizer).im_end])
    out = make_rollout(tokenizer, OracleEvaluator(), mode="all").run(TASKS, policy, seed=0)
    solved = np.asarray([[r.solved_turn or 0 for r in out.rows[g * 4:(g + 1) * 4]] for g in range(len(TASKS))])
    for groups in ([0, 1], [2, 3], [3], [2, 0]):
        sub = select_groups(out, groups)
        assert sub.tasks == [TASKS[g] for g in groups]
        assert [r.task for r in sub.rows] == [TASKS[g] for g in groups for _ in range(4)]
        m = outcome_metrics(sub)
        s = solved[groups]
        for t in (1, 2, 3):  # NumPy reference from the rows' own solved turns
            assert m[f"acc@{t}"] == pytest.approx(((s > 0) & (s <= t)).mean())
    with pytest.raises(IndexError, match="out of range"):
        select_groups(out, [4])


def test_env_errors_are_excluded_and_counted(tokenizer):
    policy = PlanPolicy(tokenizer, GOOD, 4, end_ids=[ChatStreams(tokenizer).im_end])
    out = make_rollout(tokenizer, OracleEvaluator(env_error_tasks=("sigmoid",))).run(TASKS, policy, seed=0)
    assert out.stats["env/env_errors"] == 4
    assert not out.row_mask[1].any() and out.row_mask[[0, 2, 3]].all()
    assert out.decisions[1] == -1  # a group with no valid row is padding, never debugged
    m = outcome_metrics(out)
    assert m["acc@1"] == pytest.approx(7 / 12)  # over the 12 valid rows only


def test_generation_and_evaluation_overlap(tokenizer):
    events = []

    class Ev(OracleEvaluator):
        def submit(self, job):
            events.append("eval")
            return super().submit(job)

    class Pol(ScriptedPolicy):
        def generate(self, requests, seed):
            events.append(f"gen{len(requests)}")
            return super().generate(requests, seed)

    pol = Pol(tokenizer, p_good=1.0, end_ids=[ChatStreams(tokenizer).im_end])
    make_rollout(tokenizer, Ev(), T=1, chunks=2).run(TASKS[:2], pol, seed=0)
    # chunk A's jobs are submitted before chunk B is generated
    assert events == ["gen4", "eval", "eval", "eval", "eval", "gen4", "eval", "eval", "eval", "eval"]


def test_mixed_policy_labels_scripted_rows(tokenizer):
    class Garbage:
        def generate(self, requests, seed):
            from leap_jax.rollout.policy import GenResponse
            return [GenResponse([5, 6], np.array([-1.0, -2.0]), "garbage", False) for _ in requests]

    scripted = ScriptedPolicy(tokenizer, p_good=1.0, end_ids=[ChatStreams(tokenizer).im_end])
    pol = MixedPolicy(Garbage(), scripted, fraction=0.5)
    out = make_rollout(tokenizer, OracleEvaluator(), T=1).run(TASKS, pol, seed=1)
    flags = [r.turns[0].scripted for r in out.rows]
    assert 0 < sum(flags) < len(flags)
    assert out.stats["rollout/scripted_frac"] == pytest.approx(np.mean(flags))
    for r in out.rows:  # scripted rows are the (good) solution, the others the base policy's text
        assert r.turns[0].result.status is (Status.CORRECT if r.turns[0].scripted else Status.FORMAT_ERROR)
    m = outcome_metrics(out)
    assert m["acc_unscripted@1"] == 0.0


def test_bad_variants_are_bad_for_the_real_parser():
    from kernels_env.source.submission import FormatError, parse_submission
    sol = get_task("relu").solution
    parse_submission(sol)
    with pytest.raises(FormatError):
        parse_submission(bad_format(sol))
    assert "#error" in bad_compile(sol) and bad_compile(sol) != sol


def test_set_params_reaches_the_policy_that_samples(tokenizer):
    params = {"w": np.ones(2)}
    sampled = SamplerPolicy(sampler=None, tokenizer=tokenizer, sampling=None)
    with pytest.raises(RuntimeError, match="set_params"):
        sampled.generate([GenRequest([1], "relu", 1, (0, 0, 1))], seed=0)
    scripted = ScriptedPolicy(tokenizer, p_good=1.0)
    mixed = MixedPolicy(sampled, scripted, fraction=0.5)
    mixed.set_params(params)  # through the mix to its sampled side; the scripted side reads none
    assert sampled.params is params
    scripted.set_params(params)
    assert not hasattr(scripted, "params")


def test_the_evaluations_stage_seconds_are_summed_into_the_stats(tokenizer):
    """env/stage_s/<stage>: each result's stage_seconds summed over the step (where an evaluation wait
    goes: compile against correctness), against the hand count."""
    import dataclasses
    from concurrent.futures import Future

    class Timed(OracleEvaluator):
        def submit(self, job):
            fut: Future = Future()
            fut.set_result(dataclasses.replace(super().submit(job).result(),
                                               stage_seconds={"compile": 0.25, "correctness": 0.5}))
            return fut

    pol = ScriptedPolicy(tokenizer, p_good=1.0, end_ids=[ChatStreams(tokenizer).im_end])
    out = make_rollout(tokenizer, Timed(), T=1).run(TASKS[:2], pol, seed=0)
    n = out.stats["env/evaluations"]
    assert n == 8
    assert out.stats["env/stage_s/compile"] == pytest.approx(0.25 * n)
    assert out.stats["env/stage_s/correctness"] == pytest.approx(0.5 * n)
    assert "env/stage_s/timing" not in out.stats
