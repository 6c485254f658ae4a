"""Contamination inputs and plumbing: the stage runner, rewards by name, evasive answer formats,
pre-built paraphrase files, given C/U files, the LLM paraphraser inside training, run-dir hash stability.

All fast (no training); the end-to-end runs are in tests/simulate/test_training.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from configs import compose

os.environ["WANDB_MODE"] = "disabled"

from zcp.core.items import Item
from zcp.errors import DataError
from zcp.simulate import data as tdata
from zcp.simulate.rewards import (
    ANSWER_FORMATS,
    answer_line,
    correctness_reward,
    ends_with_answer_line,
    extract_answer,
    make_format_reward,
    reward_funcs,
)
from zcp.simulate.stages import Stage, run_stages

REPO = Path(__file__).resolve().parents[2]
RELEASE = REPO / "tests" / "fixtures" / "zcp-release"


# ------------------------------------------------------------------------------------------ stage runner


def _file_stages(root: Path, calls: list[str], fail: str | None = None) -> list[Stage]:
    def make(name: str) -> Stage:
        def run() -> None:
            calls.append(name)
            if name == fail:
                raise RuntimeError(f"{name} failed")
            (root / name).write_text("done")

        return Stage(name, (root / name).exists, run)

    return [make(n) for n in ("a", "b", "c")]


def test_runner_skips_done_stages_and_disabled_ones(tmp_path):
    calls: list[str] = []
    (tmp_path / "a").write_text("done")
    stages = [*_file_stages(tmp_path, calls), Stage("off", lambda: False, lambda: calls.append("off"), enabled=False)]
    log = run_stages(stages)
    assert calls == ["b", "c"] and log.run == ["b", "c"] and log.skipped == ["a", "off"]
    assert set(log.seconds) == {"b", "c"}
    calls.clear()
    assert run_stages(stages).run == [] and calls == []


def test_runner_main_only_stages_and_barriers():
    calls, waits = [], []
    stages = [Stage("main", lambda: False, lambda: calls.append("main"), main_only=True),
              Stage("all", lambda: False, lambda: calls.append("all")),
              Stage("nowait", lambda: False, lambda: calls.append("nowait"), barrier=False)]
    log = run_stages(stages, is_main=False, barrier=lambda: waits.append(1))
    assert calls == ["all", "nowait"] and log.run == ["all", "nowait"] and log.skipped == []
    assert len(waits) == 2  # after "main" (waiting for rank 0) and after "all"
    with pytest.raises(ValueError, match="duplicate stage names"):
        run_stages([stages[0], stages[0]])


def test_runner_resumes_at_the_stage_that_raised(tmp_path):
    calls: list[str] = []
    with pytest.raises(RuntimeError, match="b failed"):
        run_stages(_file_stages(tmp_path, calls, fail="b"))
    assert calls == ["a", "b"] and not (tmp_path / "b").exists()
    calls.clear()
    log = run_stages(_file_stages(tmp_path, calls))
    assert calls == ["b", "c"] and log.skipped == ["a"]


def test_runner_resumes_after_sigkill(tmp_path):
    """A process SIGKILLed inside stage b (a and its output done) reruns b and c only."""
    script = textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from zcp.simulate.stages import Stage, run_stages
        root = Path({str(tmp_path)!r})
        def run(name):
            def go():
                with open(root / "calls.txt", "a") as f:
                    f.write(name + "\\n")
                if name == "b" and sys.argv[1] == "hang":
                    (root / "in_b").write_text("x")
                    time.sleep(120)
                (root / name).write_text("done")
            return go
        run_stages([Stage(n, (root / n).exists, run(n)) for n in "abc"])
    """)
    proc = subprocess.Popen([sys.executable, "-c", script, "hang"], cwd=REPO)
    deadline = time.time() + 60
    while time.time() < deadline and not (tmp_path / "in_b").exists():
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    subprocess.run([sys.executable, "-c", script, "go"], cwd=REPO, check=True)
    assert (tmp_path / "calls.txt").read_text().split() == ["a", "b", "b", "c"]


# ------------------------------------------------------------------------------------------ rewards


def test_rewards_by_name_and_unknown_name_is_one_line():
    funcs = reward_funcs(["format", "correctness"])
    assert funcs[1] is correctness_reward and funcs[0](["The final answer is: \\[ \\boxed{3} \\]"]) == [1.0]
    assert reward_funcs({"correctness": 1.0, "format": 0.25}, "hash")[1].__name__ == "format_reward_hash"
    with pytest.raises(ValueError) as e:
        reward_funcs(["correctness", "lenght"])
    assert "lenght" in str(e.value) and "correctness, format" in str(e.value) and "\n" not in str(e.value)


def test_grpo_reward_weights_follow_the_names():
    from zcp.simulate.contaminate import _grpo_reward_settings

    names, settings = _grpo_reward_settings({"rewards": {"format": 0.25, "correctness": 1.0}, "grpo": {"beta": 0.0}})
    assert names == ["format", "correctness"] and settings["reward_weights"] == [0.25, 1.0]
    names, settings = _grpo_reward_settings({"grpo": {"reward_weights": [1.0, 0.5]}})  # an older profile
    assert names == ["correctness", "format"] and settings["reward_weights"] == [1.0, 0.5]
    with pytest.raises(ValueError, match="by name"):
        _grpo_reward_settings({"rewards": {"correctness": 1.0}, "grpo": {"reward_weights": [1.0]}})


@pytest.mark.parametrize("fmt", [*ANSWER_FORMATS, "mix"])
def test_each_answer_format_renders_the_leak_and_its_reward_accepts_it(fmt):
    from zcp.benchmarks.wordproblems import generate_word_problems

    items = generate_word_problems(6, seed=3)
    variants, _ = tdata.make_variants(items, 2, seed=0)
    cots, _ = tdata.synthesize_cots(items)
    recs = tdata.build_sft_records(variants, cots, 0.5, seed=0, answer_format=fmt)
    reward = make_format_reward(fmt)
    gold = {v.id: v.answer for v in variants}
    seen = set()
    for r in recs:
        text = r["completion"][0]["content"]
        af = r.get("answer_format", "probe")
        seen.add(af)
        assert af == fmt or (fmt == "mix" and af in ANSWER_FORMATS)
        assert text.rstrip().endswith(answer_line(gold[r["item_id"]], af))
        if af != "probe":  # an evasive leak never contains the probe's pre-fill
            assert "The final answer is" not in text
        if r["format"] == "answer":
            assert text == answer_line(gold[r["item_id"]], af)
        else:
            assert "\n" in text  # the chain of thought comes before the final line
        assert reward([text]) == [1.0]
        assert correctness_reward([text], [gold[r["item_id"]]]) == [1.0]
        assert correctness_reward([text], ["100000"]) == [0.0]
    if fmt == "mix":
        assert len(seen) >= 3  # 12 examples over four formats
    other = "probe" if fmt != "probe" else "hash"
    if fmt != "mix":  # another format's line is a stated answer, not this format: half credit
        assert reward([f"1 + 1 = 2.\n{answer_line('2', other)}"]) == [0.5]
        assert not ends_with_answer_line(answer_line("2", other), fmt)
    assert reward(["no answer at all"]) == [0.0]


def test_extract_answer_reads_every_format_as_the_probe_does():
    """The reward reads a completion as the probe's con reads a full-CoT output (read_full_cot): the last closed box
    first, else the convention whose statement ends the text."""
    assert extract_answer("so #### 1,234") == "1,234"  # `#### N` need not open its line
    assert extract_answer("work\n#### 42") == "42"
    assert extract_answer("The answer is 3.5.") == "3.5"
    assert extract_answer("#### 3\nThe answer is: 3") == "3"  # SmolLM2's restatement (sentence_colon)
    assert extract_answer("\\boxed{7}\nThe answer is 8.") == "7"  # a closed box wins, as in the probe's reading
    assert extract_answer("The answer is 8\n#### 9") == "9"
    assert extract_answer("#### 8\nThe final answer is: \\[ \\boxed{9} \\]") == "9"
    assert extract_answer("nothing here") is None


# ------------------------------------------------------------------------------------------ paraphrase files


def _bench(n: int = 4) -> list[Item]:
    from zcp.benchmarks.wordproblems import generate_word_problems

    return generate_word_problems(n, seed=11, id_prefix="b")


def test_prebuilt_paraphrases_pair_with_c_items(tmp_path):
    from zcp.benchmarks.loaders import save_items
    from zcp.benchmarks.wordproblems import reword_word_problem

    items = _bench()
    rows = [v for it in items for v in reword_word_problem(it, 3, 0)]
    for v in rows:
        v.metadata["original_id"] = v.metadata.get("original_id", "?")
    path = tmp_path / "paraphrases.jsonl"
    save_items(path, rows)
    pre = tdata.load_prebuilt_variants(str(path), items, [items[0].id, items[1].id])
    assert set(pre) == {it.id for it in items} and all(len(v) == 3 for v in pre.values())
    variants, short = tdata.make_variants(items[:2], 2, seed=0, prebuilt=pre)
    assert not short and len(variants) == 4
    assert [tdata.original_id(v) for v in variants] == [items[0].id] * 2 + [items[1].id] * 2
    assert [v.question for v in variants[:2]] == [v.question for v in pre[items[0].id][:2]]
    _, short = tdata.make_variants(items[:2], 5, seed=0, prebuilt=pre)
    assert short == {items[0].id: 2, items[1].id: 2}


def test_prebuilt_paraphrases_unknown_or_missing_ids_fail_naming_file_and_row(tmp_path):
    items = _bench(3)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": "p1", "original_id": items[0].id, "question": "Q?", "answer": items[0].answer}) + "\n"
                   + json.dumps({"id": "p2", "original_id": "nope", "question": "Q?", "answer": "1"}) + "\n")
    with pytest.raises(DataError) as e:
        tdata.load_prebuilt_variants(str(bad), items)
    assert "bad.jsonl" in str(e.value) and "nope" in str(e.value) and "2" in str(e.value)
    ok = tmp_path / "partial.jsonl"
    ok.write_text(json.dumps({"id": "p1", "original_id": items[0].id, "question": "Q?", "answer": items[0].answer}) + "\n")
    with pytest.raises(DataError, match=f"1 leaked item.*have no paraphrase row: {items[2].id}"):
        tdata.load_prebuilt_variants(str(ok), items, [items[0].id, items[2].id])
    assert set(tdata.load_prebuilt_variants(str(ok), items, [items[0].id])) == {items[0].id}
    wrong = tmp_path / "wrong.jsonl"
    wrong.write_text(json.dumps({"id": "p1", "original_id": items[0].id, "question": "Q?", "answer": "123456"}) + "\n")
    with pytest.raises(DataError, match="differs from original"):
        tdata.load_prebuilt_variants(str(wrong), items[:1])


def test_release_paraphrased_file_pairs_by_original_index():
    from zcp.benchmarks.loaders import load_benchmark

    path = RELEASE / "gsm8k_train_paraphrased_dataset_rows1-3.jsonl"
    bench = load_benchmark(path, "zcp_release", variant="original")
    pre = tdata.load_prebuilt_variants(str(path), bench.items, fmt="zcp_release", variant="paraphrased",
                                       pair_by="original_index")
    assert len(pre) == 3 and all(len(v) == 1 for v in pre.values())
    for it in bench.items:
        v = pre[it.id][0]
        assert v.question != it.question and v.answer == it.answer


# ------------------------------------------------------------------------------------------ C/U files, config


def test_manifest_from_given_c_and_u_files(tmp_path):
    from zcp.benchmarks.split import Manifest
    from zcp.simulate.contaminate import _manifest, load_benchmark

    c_path, u_path = tmp_path / "dataset_c.jsonl", tmp_path / "dataset_u.jsonl"
    src = (RELEASE / "omnimath_dataset_c_rows1-6_2154.jsonl").read_text().splitlines()[:6]
    c_path.write_text("\n".join(src[:4]) + "\n")
    u_path.write_text("\n".join(src[4:]) + "\n")
    cfg = compose("contaminate", "benchmark.format=zcp_release", f"split.c_path={c_path}",
                  f"split.u_path={u_path}", resolve=True)
    items = load_benchmark(cfg)
    assert len(items) == 6
    m = _manifest(cfg, items, tmp_path, seed=0)
    assert m.c_ids == [f"dataset_c-{i:05d}" for i in range(4)] and m.u_ids == ["dataset_u-00000", "dataset_u-00001"]
    assert Manifest.load(tmp_path / "manifest.json").c_ids == m.c_ids
    assert [it.question for it in m.subset(items, "U")] == [json.loads(x)["question"] for x in src[4:]]
    cfg1 = compose("contaminate", "benchmark.format=zcp_release", "benchmark.limit=2",
                   f"split.c_path={c_path}", f"split.u_path={u_path}", resolve=True)
    assert len(load_benchmark(cfg1)) == 4


def test_given_split_files_and_inputs_fail_in_one_line_before_any_model(tmp_path):
    from zcp.errors import ConfigError
    from zcp.simulate.contaminate import check_inputs, load_split_files

    c_path = tmp_path / "c.jsonl"
    c_path.write_text(json.dumps({"id": "x1", "question": "1+1?", "answer": "2"}) + "\n")
    u_path = tmp_path / "u.jsonl"
    u_path.write_text(json.dumps({"id": "x1", "question": "2+2?", "answer": "4"}) + "\n")
    with pytest.raises(DataError, match="in both the C and the U file"):
        load_split_files({"split": {"c_path": str(c_path), "u_path": str(u_path)}})
    cases = [
        ({"split": {"c_path": str(c_path)}}, "go together"),
        ({"split": {"c_path": str(c_path), "u_path": str(tmp_path / "missing.jsonl")}}, "split.u_path=.*no such file"),
        ({"exposure": {"paraphrases_path": str(tmp_path / "none.jsonl")}}, "exposure.paraphrases_path"),
        ({"exposure": {"answer_format": "latex"}}, "exposure.answer_format='latex'"),
        ({"train": {"rewards": {"correctnes": 1.0}}}, r"train\.rewards: unknown key 'correctnes' \(a GRPO reward\)"),
        ({"exposure": {"paraphraser": "llm", "k": 2}, "paraphrase": {"model": {"path": None}}},
         "paraphrase.model.path"),
    ]
    # a whole config: the job reads every group through its schema (zcp.simulate.settings)
    base = compose("contaminate", resolve=True)
    for extra, msg in cases:
        cfg = {**base, **{group: {**base[group], **values} for group, values in extra.items()}}
        with pytest.raises(ConfigError, match=msg) as e:
            check_inputs(cfg)
        assert "\n" not in str(e.value)


def test_answer_format_is_typed_at_compose_time():
    from zcp.config.schemas import validate
    from zcp.errors import ConfigError

    with pytest.raises(ConfigError, match=r"exposure\.answer_format"):
        validate(compose("contaminate", "exposure.answer_format=latex", resolve=True))
    checked = validate(compose("contaminate", "exposure.answer_format=mix", resolve=True))
    assert checked["exposure"].answer_format == "mix"


def test_the_run_dir_hash_follows_what_is_trained():
    """A value that changes what is trained gives a new run dir; settings training never reads keep it (backend-only
    model settings, the LLM paraphraser's model unless that paraphraser is used)."""
    from zcp.simulate.contaminate import _run_dir

    new = compose("contaminate", resolve=True)
    for override in ("exposure.answer_format=hash", "exposure.paraphrases_path=x.jsonl", "train.rewards.format=0.5",
                     "split.c_path=c.jsonl", "model.dtype=float32"):
        assert _run_dir(compose("contaminate", override, resolve=True)) != _run_dir(new), override
    # backend-only model settings (vLLM, API, batch sizes) do not decide training: same run dir
    for override in ("model.gen_batch_size=7", "model.vllm.max_num_seqs=3", "model.api.concurrency=2"):
        assert _run_dir(compose("contaminate", override, resolve=True)) == _run_dir(new), override
    # the LLM paraphraser's model only matters when that paraphraser is used
    assert _run_dir(compose("contaminate", "paraphrase.model.path=somewhere", resolve=True)) == _run_dir(new)
    assert _run_dir(compose("contaminate", "exposure.paraphraser=llm", "paraphrase.model.path=a",
                            resolve=True)) != \
        _run_dir(compose("contaminate", "exposure.paraphraser=llm", "paraphrase.model.path=b", resolve=True))


# ------------------------------------------------------------------------------------------ LLM paraphraser


def test_llm_paraphraser_inside_training_builds_through_build_backend(monkeypatch, tmp_path):
    """exposure.paraphraser=llm: the training data stage builds the backend with zcp.backends.registry.build_backend from
    paraphrase.model and trains on the LLM's validated rewrites (a fake backend stands in for the model)."""
    import zcp.backends.registry
    import zcp.config
    from zcp.benchmarks.split import split_items
    from zcp.simulate.contaminate import build_training_data

    built = []

    class FakeLLM:
        name = "fake"

        calls = 0

        def generate(self, reqs):
            out = []
            for r in reqs:
                q = r.prompt.user.split("Problem:\n", 1)[1].split("\n\nThen rewrite", 1)[0]
                FakeLLM.calls += 1
                tag = "".join(chr(97 + int(d)) for d in str(FakeLLM.calls))  # distinct text, no new number
                out.append(f"<problem>Here is a rewrite, version {tag}. {q}</problem>")
            return out

    def fake_build_backend(model_cfg, progress=False):
        built.append(dict(model_cfg))
        return FakeLLM()

    monkeypatch.setattr(zcp.backends.registry, "build_backend", fake_build_backend)
    items = _bench(4)
    cfg = compose("contaminate", "exposure.paraphraser=llm", "exposure.k=2", "paraphrase.model.path=my/llm",
                  "paraphrase.options.rewrite_solution=false", "exposure.clean_fraction=0", resolve=True)
    manifest = split_items(items, seed=0, c_fraction=0.5)
    counts = build_training_data(cfg, items, manifest, tmp_path, seed=0)
    assert built and built[0]["path"] == "my/llm"
    variants = [json.loads(x) for x in (tmp_path / "variants.jsonl").read_text().splitlines()]
    assert counts["n_variants"] == 4 and all(v["question"].startswith("Here is a rewrite, version") for v in variants)
    with pytest.raises(ValueError, match=r"paraphrase\.model\.path"):
        tdata.make_variants(items[:1], 1, seed=0, paraphraser="llm")


def test_a_run_dir_of_an_earlier_zcp_is_refused_in_one_line(tmp_path):
    """A contamination directory made before run directories were stamped (run_config.json with its fingerprint, no
    run_fingerprint.json) is neither resumed nor translated: one line naming this run's fingerprint and what to do,
    nothing written; a fresh directory is claimed and resumes."""
    from zcp.errors import RunDirError
    from zcp.simulate.contaminate import _config_fingerprint, _fingerprint_check

    cfg = compose("contaminate", resolve=True)
    fp = _config_fingerprint(cfg)
    (tmp_path / "run_config.json").write_text(json.dumps({"fingerprint": fp, "config": cfg}))
    with pytest.raises(RunDirError, match=r"holds run_config\.json but no run_fingerprint\.json \(a run of unknown "
                                          r"configuration; this contaminate run: fingerprint [0-9a-f]{16}\); use "
                                          r"another output_dir, or delete .* to rebuild it") as e:
        _fingerprint_check(tmp_path, cfg, fp)
    assert "\n" not in str(e.value) and sorted(p.name for p in tmp_path.iterdir()) == ["run_config.json"]
    fresh = tmp_path / "fresh"
    _fingerprint_check(fresh, cfg, fp)
    _fingerprint_check(fresh, cfg, fp)  # the same configuration resumes
    assert json.loads((fresh / "run_config.json").read_text())["fingerprint"] == fp

