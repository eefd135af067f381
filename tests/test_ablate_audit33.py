"""`albertlm ablate` audit 33: a suite without fine-tuning, on a Korean corpus.

A user asking "which E and sharing suit my Korean corpus?" may have no labelled task in that language: a scale
file's `finetune_tasks = []` (refused before) makes a suite that pretrains and evaluates on held-out data only
(MLM / SOP / NSP accuracy, layer transitions): no fine-tuning, no no-pretraining baselines (random models
fine-tuned), a report without downstream tables or columns, and claims 2, 3 and 5 (judged on downstream scores)
"not measured (no fine-tuning task in this scale)", in report.md and results.json. A task added to the scale
file later continues the suite with fine-tuning only: the finished runs are fine-tuned from their kept
checkpoints and the baselines run. The suite's own tokenizer keeps accents and marks for a corpus that is mostly
not Latin letters (ALBERT's accent stripping turned ガ into カ). The end-to-end run is tiny (smoke base, 4 steps,
one variant, SST-2 on 64 examples)."""
from __future__ import annotations

import json

import pytest

from albertlm.cli.main import main
from albertlm.errors import UserError
from albertlm.experiments.scales import get_scale, read_scale_file
from conftest import assert_one_error, shared_path

NO_FINETUNING = "not measured (no fine-tuning task in this scale)"
INTRINSIC = """base = "smoke"
vocab_size = 2000
max_steps = 4
finetune_seeds = 2
finetune_tasks = []
"""
WITH_SST2 = """base = "smoke"
vocab_size = 2000
max_steps = 4

[[finetune_tasks]]
name = "sst2"
max_train = 64
epochs = 1
"""


def _korean_corpus(root):
    """KorNLI dev's Korean sentences (each once), 8 to a document: 90% of the documents for training, the rest
    held out."""
    rows = shared_path("korean", "KorNLI", "xnli.dev.ko.tsv").read_text(encoding="utf-8").splitlines()[1:]
    sentences = list(dict.fromkeys(c for row in rows for c in row.split("\t")[:2] if c.strip()))
    docs = ["\n".join(sentences[i:i + 8]) for i in range(0, len(sentences), 8)]
    cut = len(docs) * 9 // 10
    corpus = root / "corpus_ko"
    corpus.mkdir()
    (corpus / "train.txt").write_text("\n\n".join(docs[:cut]) + "\n", encoding="utf-8")
    (corpus / "heldout.txt").write_text("\n\n".join(docs[cut:]) + "\n", encoding="utf-8")
    return corpus


# ------------------------------------------------------------------------------------------------ reading
def test_a_scale_file_may_name_no_finetuning_task(tmp_path):
    toml = tmp_path / "ko.toml"
    toml.write_text(INTRINSIC, encoding="utf-8")
    scale = read_scale_file(toml)
    assert scale.finetune_tasks == () and scale.intrinsic_only
    assert json.loads(json.dumps(scale.to_dict()))["finetune_tasks"] == []   # as suite.json records it
    js = tmp_path / "ko.json"
    js.write_text(json.dumps({"base": "cpu", "finetune_tasks": []}), encoding="utf-8")
    assert get_scale(str(js)).intrinsic_only and not get_scale("cpu").intrinsic_only
    js.write_text(json.dumps({"base": "cpu", "finetune_tasks": "sst2"}), encoding="utf-8")
    with pytest.raises(UserError, match=r"finetune_tasks must be a list of tasks .*\[\] for none") as refused:
        read_scale_file(js)
    assert "\n" not in str(refused.value)


def test_a_suite_without_finetuning_plans_no_baselines(tmp_path):
    from albertlm.experiments.runner import make_suite, plan_jobs, suite_jobs

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name in ("train.txt", "heldout.txt"):
        (corpus / name).write_text("하나.\n둘.\n\n셋.\n", encoding="utf-8")
    path = tmp_path / "ko.toml"
    path.write_text(INTRINSIC, encoding="utf-8")
    suite = make_suite(tmp_path / "out", read_scale_file(path), "table5", corpus, tmp_path)
    assert [j.kind for j in suite_jobs(suite)] == ["pretrain"] * 3
    assert [j.kind for j in plan_jobs(suite.runs)].count("scratch") == 1   # (with baselines: one shape, one seed)
    named = make_suite(tmp_path / "out2", get_scale("smoke"), "table5", corpus, tmp_path)
    assert [j.kind for j in suite_jobs(named)].count("scratch") == 1


def test_finetuning_options_with_no_finetuning_task_are_refused(tmp_path, capsys):
    path = tmp_path / "ko.toml"
    path.write_text(INTRINSIC, encoding="utf-8")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name in ("train.txt", "heldout.txt"):
        (corpus / name).write_text("하나.\n둘.\n", encoding="utf-8")
    code = main(["ablate", "--scale", str(path), "--corpus", str(corpus), "--out", str(tmp_path / "out"),
                 "--finetune-seeds", "3", "--list-jobs"])
    assert_one_error(capsys, code, "finetune_tasks = []", "--finetune-seeds has nothing to fine-tune")
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------------ the suite's tokenizer
def test_the_suites_tokenizer_keeps_the_marks_of_a_corpus_not_in_latin_letters(tmp_path):
    """ALBERT's accent stripping (NFKD, combining characters dropped) is for English: on Japanese it dropped the
    voiced sound marks (ガラス became カラス), and the suite gave no way to train without it."""
    import random

    from albertlm.experiments.runner import train_tokenizer
    from albertlm.tokenization import load_tokenizer

    rng = random.Random(0)
    words = ["ガラス", "パン", "ドア", "ブドウ", "ゲーム", "テレビ", "カメラ", "でんわ", "がっこう", "です", "これは", "学校"]
    text = tmp_path / "ja.txt"
    text.write_text("\n".join(" ".join(rng.choice(words) for _ in range(8)) + "。" for _ in range(2000)) + "\n",
                    encoding="utf-8")
    notes = []
    assert train_tokenizer(text, tmp_path / "tok", 40, "smoke", notes.append)["keep_accents"] is True
    pieces = "".join(load_tokenizer(tmp_path / "tok").tokenize("ガラス ブドウ パン")).replace("\u2581", "")
    assert pieces == "ガラスブドウパン"
    english = tmp_path / "en.txt"
    english.write_text(shared_path("text", "gutenberg", "carroll-alice.txt").read_text(encoding="utf-8"))
    assert train_tokenizer(english, tmp_path / "tok_en", 400, "smoke", notes.append)["keep_accents"] is False


# ------------------------------------------------------------------------------------------- end to end
def test_a_korean_suite_without_finetuning_then_with_a_task(tmp_path, capsys, monkeypatch):
    corpus = _korean_corpus(tmp_path)
    grid = tmp_path / "one.json"
    grid.write_text(json.dumps([{"embedding": 128, "sharing": "all"}]))
    intrinsic, with_task = tmp_path / "ko.toml", tmp_path / "ko_sst2.toml"
    intrinsic.write_text(INTRINSIC, encoding="utf-8")
    with_task.write_text(WITH_SST2, encoding="utf-8")
    out = tmp_path / "out"
    run = ["ablate", "--grid", str(grid), "--corpus", str(corpus), "--out", str(out)]
    monkeypatch.chdir(tmp_path)         # no GLUE folder under the default --glue-dir: none is needed
    assert main([*run, "--scale", str(intrinsic)]) == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    assert "no fine-tuning nor no-pretraining baselines" in printed and "tokenizer keeps accents and marks" in printed
    assert printed.splitlines()[-1] == "albertlm ablate: 1 job run, 0 skipped, 0 failed"
    run_dir = out / "runs" / "E128-all-sop-s1"
    first = json.loads((run_dir / "result.json").read_text())
    assert first["finetune"] == {} and 0 <= first["intrinsic"]["mlm_acc"] <= 1 and first["transitions"]
    assert not (out / "scratch").exists() and not (out / "downstream.png").exists()
    assert json.loads((out / "prepared" / "prepared.json").read_text())["tokenizer"]["keep_accents"] is True
    report = (out / "report.md").read_text()
    assert "Fine-tuning: none (no fine-tuning task in this scale)" in report
    assert "Finished: 1 pretraining run of 1 job planned (no fine-tuning task in this scale" in report
    assert "accents and marks kept" in report
    assert "## No pretraining" not in report and "paper Avg" not in report and "scratch Avg" not in report
    assert "## Every pretrained model" in report and "## Table 5" in report
    claims = {line[0]: line for line in report.splitlines() if line[:2] in ("1.", "2.", "3.", "4.", "5.")}
    for key in "235":
        assert f"**not measured** (no fine-tuning task in this scale; " in claims[key], claims[key]
    assert "no fine-tuning task" not in claims["1"] + claims["4"]
    results = json.loads((out / "results.json").read_text())
    assert results["downstream"] == NO_FINETUNING
    assert {k: results["claims"][k]["why"] for k in "235"} == dict.fromkeys("235", NO_FINETUNING)
    assert results["scale"]["finetune_tasks"] == [] and results["scratch"] == {}

    metrics = (run_dir / "metrics.jsonl").read_text()
    assert main([*run, "--scale", str(intrinsic)]) == 0                    # a rerun: nothing to do
    assert capsys.readouterr().out.splitlines()[-1] == "albertlm ablate: 0 jobs run, 1 skipped, 0 failed"

    # SST-2 added to the scale file: the finished run is fine-tuned from its kept checkpoint, the baseline runs
    glue = ["--glue-dir", str(shared_path("glue"))]
    assert main([*run, "--scale", str(with_task), *glue, "--list-jobs"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed[-3].startswith("pretrain E128-all-sop-s1") and listed[-3].endswith(" fine-tune")
    assert listed[-2].startswith("scratch  scratch-E128-all-s1") and listed[-2].endswith(" to-run")
    assert main([*run, "--scale", str(with_task), *glue]) == 0, capsys.readouterr().err
    assert capsys.readouterr().out.splitlines()[-1] == "albertlm ablate: 2 jobs run, 0 skipped, 0 failed"
    second = json.loads((run_dir / "result.json").read_text())
    assert second["pretrain"] == first["pretrain"] and (run_dir / "metrics.jsonl").read_text() == metrics
    # one fine-tuning seed (the file's, smoke's): the 2 of the first file fine-tuned nothing, so none are kept
    assert second["finetune"]["sst2"]["seeds"] == [1]
    assert "sst2" in json.loads((out / "scratch" / "scratch-E128-all-s1" / "result.json").read_text())["finetune"]
    report = (out / "report.md").read_text()
    assert "## No pretraining" in report and NO_FINETUNING not in report and "Fine-tuning: SST-2" in report
    results = json.loads((out / "results.json").read_text())
    assert results["downstream"] is None and results["claims"]["5"].get("why") != NO_FINETUNING

    # and back to no task: its fine-tunings are set aside with --refinetune, and the plan has no baselines again
    code = main([*run, "--scale", str(intrinsic), "--list-jobs"])
    assert_one_error(capsys, code, "was fine-tuned (sst2) and this scale fine-tunes nothing: add --refinetune")
    assert main([*run, "--scale", str(intrinsic), "--refinetune"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "albertlm ablate: 0 jobs run, 1 skipped, 0 failed"
    assert [j["kind"] for j in json.loads((out / "suite.json").read_text())["jobs"]] == ["pretrain"]
    report = (out / "report.md").read_text()
    assert "of 1 job planned (no fine-tuning task" in report and "## No pretraining" not in report
    assert json.loads((out / "results.json").read_text())["downstream"] == NO_FINETUNING
