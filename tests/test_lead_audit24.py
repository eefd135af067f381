"""The lead's follow-ups in the twenty-fourth session's audits (each fails on the code before it)."""
from __future__ import annotations

import sys

import pytest

from albertlm.data import corpus
from conftest import save_tiny_pretrained
from test_formats_audit24 import _documents


def test_an_unclosed_csv_quote_ends_the_file_as_a_bad_row_not_a_field_holding_the_rest(tmp_path, monkeypatch):
    """Memory stays bounded on a CSV corpus: an unclosed quote makes the csv module read every following line into
    one field; past CSV_FIELD_LIMIT (here made small) that is a bad row that ends the file, not a field of the whole
    rest of a many-GB file. The rows before it are read."""
    monkeypatch.setattr(corpus, "CSV_FIELD_LIMIT", 5000)
    path = tmp_path / "broken.csv"
    rest = "".join(f"row {k} of the rest. It is text.\n" for k in range(6000))   # past csv.field_size_limit() too
    path.write_text(f'id,text\n1,A good row. It reads.\n2,"An unclosed quote. Then\n{rest}', encoding="utf-8")
    documents, counts = _documents(path)
    assert documents == [["A good row.", "It reads."]]
    assert counts.bad_rows == 1 and "the rest of the file was not read" in counts.examples["bad_rows"]
    assert corpus.CSV_FIELD_LIMIT <= 10 * corpus.MAX_DOCUMENT_CHARS


def test_adamweightdecay_is_googles_fine_tuning_optimizer_and_the_paper_recipes_use_it():
    """`--optim.name adamweightdecay` builds google-research's AdamWeightDecayOptimizer (no bias correction; decay
    added to the update; the same exemptions), checked against test_google_finetune_audit24's transcription of it
    on a layer with a decayed weight and an exempt bias; `--recipe paper` picks it (torch's bias-corrected AdamW
    took steps about half google's over the RTE / MRPC recipes). Asking it for bias correction is refused."""
    import pytest
    import torch

    from albertlm.config.run import OptimConfig
    from albertlm.errors import UserError
    from albertlm.tasks import recipes
    from albertlm.training.lamb import build_optimizer
    from test_google_finetune_audit24 import GoogleAdamWeightDecay

    generator = torch.Generator().manual_seed(0)
    model = torch.nn.Linear(3, 5).double()
    start = {k: v.detach().clone() for k, v in model.state_dict().items()}
    grads = [{k: torch.randn(v.shape, generator=generator, dtype=torch.float64) for k, v in start.items()}
             for _ in range(6)]
    optimizer = build_optimizer(model, OptimConfig(name="adamweightdecay", lr=1e-2, weight_decay=0.01, eps=1e-6))
    google = {"output_weights": start["weight"].clone(), "output_bias": start["bias"].clone()}
    reference = GoogleAdamWeightDecay(1e-2)
    for g in grads:
        model.weight.grad, model.bias.grad = g["weight"].clone(), g["bias"].clone()
        optimizer.step()
        reference.apply_gradients([(g["weight"], ("output_weights", google["output_weights"])),
                                   (g["bias"], ("output_bias", google["output_bias"]))])
    torch.testing.assert_close(model.weight.data, google["output_weights"], rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(model.bias.data, google["output_bias"], rtol=1e-12, atol=1e-15)

    for task in ("rte", "mrpc", "sst2", "squad2.0", "race-v2"):
        assert recipes.recipe(task).optim.name == "adamweightdecay"
    with pytest.raises(UserError, match="optim.bias_correction.*adamweightdecay has none"):
        OptimConfig(name="adamweightdecay", bias_correction=True)


def test_a_run_started_with_the_recipes_old_optimizer_resumes_without_recipe_and_is_refused_with_it(tmp_path,
                                                                                                      capsys):
    """docs/finetuning.md's note: a run that a recipe started on torch's AdamW (the recipes' optimizer until they
    took google's) is refused when resumed with `--recipe` given again (the recipe's `optim.name` differs, named),
    and resumes without it, keeping the recorded optimizer."""
    import json

    from conftest import assert_one_error
    from test_classify_audit22 import _finetune

    (tmp_path / "tiny").mkdir()
    model = save_tiny_pretrained(tmp_path / "tiny")
    out = tmp_path / "run"
    assert _finetune(model, tmp_path, out, "--recipe", "sst2", "--optim.name", "adamw") == 0, capsys.readouterr().err
    capsys.readouterr()
    code = _finetune(model, tmp_path, out, "--recipe", "sst2", "--resume", "--max-steps", "3")
    assert_one_error(capsys, code, "optim.name")
    assert _finetune(model, tmp_path, out, "--resume", "--max-steps", "3") == 0, capsys.readouterr().err
    assert json.loads((out / "metrics.json").read_text())["config"]["optim"]["name"] == "adamw"


class _Killed(BaseException):
    """A kill -9 between two steps: nothing after it runs (no handler, no record, no save)."""


def test_a_run_killed_between_a_save_and_the_next_record_logs_every_step_once_after_resume(tmp_path, monkeypatch):
    """--save-every 3 with --log-every 4: a run killed at step 6's save resumes from step 3, where its window of
    steps 1-3 had been in no record (the record at 4, covering 1-4, is dropped as past the checkpoint; the resumed
    window starts at 4). The checkpoint now keeps the window no record covered yet (`loop.UNLOGGED`) and the resumed
    run goes on with it, so its training records are the uninterrupted run's, value for value."""
    from test_train_audit16 import _loop, _records

    settings = dict(max_steps=8, save_every=3, log_every=4)
    whole = tmp_path / "whole"
    assert _loop(whole, **settings).run() == "done"

    killed = tmp_path / "killed"
    loop = _loop(killed, **settings)
    save = loop.save

    def dies_at_step_6():
        if loop.state.step == 6:
            raise _Killed
        save()

    monkeypatch.setattr(loop, "save", dies_at_step_6)
    import pytest
    with pytest.raises(_Killed):
        loop.run()
    loop.logger.close()
    assert _loop(killed, resume=True, **settings).run() == "done"

    def train(run):
        return [(r["step"], round(r["loss"], 6)) for r in _records(run) if r["split"] == "train"]

    assert [step for step, _ in train(whole)] == [4, 8]           # the records --log-every asks for, no others
    assert train(killed) == train(whole)


@pytest.mark.parametrize("argv", [["info", "albert-base-v2"], ["convert", "albert-base-v2", "out"],
                                  ["pretrain", "--init-from", "albert-base-v2", "--data", "nodata", "--out", "r"]])
def test_a_hub_name_where_a_model_directory_goes_says_albertlm_downloads_nothing(argv, tmp_path, monkeypatch,
                                                                                  capsys):
    """`info`, `convert` and `pretrain --init-from` said "not a directory" / "no such file or directory" for a Hub
    name, where fill-mask, finetune, evaluate and export say that albertlm downloads nothing and how to fetch it."""
    from albertlm.cli.main import main
    from conftest import assert_one_error

    monkeypatch.chdir(tmp_path)
    assert_one_error(capsys, main(argv), "albert-base-v2", "downloads nothing", "hf download")


def test_race_predictions_for_questions_the_split_lacks_are_refused_not_ignored(tmp_path, capsys):
    """`evaluate race --predictions` scored the questions it found and ignored the others (another split's or data
    set's file scored on the ids the two share, exit 0). A prediction naming a question of a level read that the
    split lacks is now refused, naming it; a level left out with --levels is left out as asked."""
    import json

    from albertlm.cli.main import main
    from conftest import assert_one_error

    root = tmp_path / "RACE"
    (root / "dev" / "middle").mkdir(parents=True)
    passage = {"id": "middle1.txt", "article": "Tom has a red ball.", "questions": ["What colour is it?"],
               "options": [["blue", "red", "green", "black"]], "answers": ["B"]}
    (root / "dev" / "middle" / "1.txt").write_text(json.dumps(passage), encoding="utf-8")
    predictions = tmp_path / "dev_predictions.json"
    argv = ["evaluate", "race", "--data-dir", str(root), "--levels", "middle", "--predictions", str(predictions)]
    predictions.write_text(json.dumps({"middle/1.txt#0": "B", "high/5.txt#0": "A"}), encoding="utf-8")
    assert main(argv) == 0                     # high was not asked for: its prediction is left out
    assert json.loads(capsys.readouterr().out)["accuracy"] == 1.0
    predictions.write_text(json.dumps({"middle/1.txt#0": "B", "middle/999.txt#0": "A"}), encoding="utf-8")
    assert_one_error(capsys, main(argv), "1 predictions name questions not in dev", "middle/999.txt#0")


def test_a_hub_mnli_dev_file_refuses_the_other_dev_sets_predictions(tmp_path, capsys):
    """`evaluate glue --task mnli --dev validation_matched-00000-of-00001.parquet --predictions
    dev_mismatched_predictions.tsv` scored one dev set's predictions against the other's labels (exit 0), where the
    TSV `dev_matched.tsv` refuses them: the Hub file's GLUE name is dev_matched too. With --data-dir of the Hub's
    MNLI folder the predictions file picks its dev file by that name."""
    from albertlm.cli.main import main
    from conftest import assert_one_error
    from test_glue_hub_audit24 import _hub_table, _parquet, _rows

    rows = _rows("mnli")
    folder = tmp_path / "mnli"
    matched = _parquet(_hub_table("mnli", rows, test=False), folder / "validation_matched-00000-of-00001.parquet")
    _parquet(_hub_table("mnli", rows, test=False), folder / "validation_mismatched-00000-of-00001.parquet")
    predictions = tmp_path / "dev_mismatched_predictions.tsv"
    predictions.write_text("index\tprediction\n" + "".join(f"{i}\t{y}\n" for i, (_, _, y) in enumerate(rows)),
                           encoding="utf-8")
    code = main(["evaluate", "glue", "--task", "mnli", "--dev", str(matched), "--predictions", str(predictions)])
    assert_one_error(capsys, code, "dev_mismatched")
    assert main(["evaluate", "glue", "--task", "mnli", "--data-dir", str(folder), "--predictions",
                 str(predictions)]) == 0, capsys.readouterr().err
    import json
    assert json.loads(capsys.readouterr().out)["accuracy"] == 1.0


def test_ablate_refuses_hub_exports_in_its_glue_dir(tmp_path):
    """glue now reads the Hub's files, so --glue-dir/RTE holding only `train-*.parquet` was found, and ablate's
    sampling read it as text (a UnicodeDecodeError); it samples GLUE's TSVs and says so in one line."""
    from types import SimpleNamespace

    from albertlm.errors import UserError
    from albertlm.experiments import runner
    from albertlm.experiments.scales import get_scale
    from test_glue_hub_audit24 import _hub_table, _parquet, _rows

    rows = _rows("rte")
    _parquet(_hub_table("rte", rows, test=False), tmp_path / "glue" / "RTE" / "train-00000-of-00001.parquet")
    _parquet(_hub_table("rte", rows, test=False), tmp_path / "glue" / "RTE" / "validation-00000-of-00001.parquet")
    task = next(t for t in get_scale("cpu").finetune_tasks)
    task = SimpleNamespace(name="rte", dir_name="RTE", max_train=task.max_train)
    with pytest.raises(UserError, match="a Hugging Face datasets export; ablate samples GLUE's own TSV files"):
        runner._task_files(SimpleNamespace(glue_dir=tmp_path / "glue"), task)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a folder name of arbitrary bytes: Linux")
def test_a_model_in_a_folder_whose_name_is_not_utf8_is_not_called_damaged(tmp_path, capsys):
    """A CP949 folder name (unzipped from a Windows archive): the safetensors library cannot open any file under it
    and says "not valid UTF-8"; `info` said the good model.safetensors was "truncated or damaged". Now it names
    the path's encoding and how to rename it."""
    import os
    import shutil

    from albertlm.cli.main import main
    from conftest import assert_one_error

    (tmp_path / "ok").mkdir()
    good = save_tiny_pretrained(tmp_path / "ok")
    cp949 = os.path.join(os.fsencode(str(tmp_path)), "결과".encode("cp949"))
    shutil.copytree(os.fsencode(str(good)), cp949)
    code = main(["info", os.fsdecode(cp949)])
    assert_one_error(capsys, code, "its path is not UTF-8", "convmv")     # (it said "truncated or damaged")


def test_device_auto_past_the_gpus_of_a_node_is_one_line(monkeypatch):
    """`torchrun --nproc-per-node 2` on a one-GPU machine: --device auto gave the second process cuda:1 without a
    check (a CUDA error later), where an explicit cuda:1 is refused in one line (CUDA faked: 1 device)."""
    import torch

    from albertlm.errors import UserError
    from albertlm.training.distributed import pick_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert pick_device("auto", 0) == torch.device("cuda", 0)
    with pytest.raises(UserError, match="LOCAL_RANK 1 .* only 1 CUDA device.*--nproc-per-node"):
        pick_device("auto", 1)
