"""`albertlm ablate --scale FILE` audit 32: a user's own scale (a laptop, a 4-GPU box).

`--scale` took only the named scales (smoke, cpu, gpu, cpu-v1, cpu-v2) and a few overrides: H, L, A, T, the batch,
the learning rate or the fine-tuning tasks could not be set. A scale file (TOML or JSON) names a `base` and the
fields it changes, each checked with a one-line error naming the file and the field; the suite records the
resolved scale (suite.json, with the file) and compares it on a rerun as it does a named scale with overrides
(`runner.check_same_scale`: another model size is refused, another fine-tuning protocol needs --refinetune).
Named scales keep their record byte for byte. The end-to-end run is tiny (smoke base, 4 steps, one variant)."""
from __future__ import annotations

import json
import shutil
from dataclasses import asdict

import pytest

from albertlm.cli.main import main
from albertlm.errors import UserError
from albertlm.experiments.scales import SCALES, get_scale, read_scale_file
from conftest import assert_one_error, shared_path
from test_ablate import _corpus as _alice_corpus
from test_ablate_audit13 import _corpus as _tiny_corpus

# H 48 (A 4, E up to 48) and T 48 instead of smoke's H 32 and T 32; 4 steps, SST-2 on 64 examples
MINE = {"base": "smoke", "hidden_size": 48, "num_heads": 4, "embedding_sizes": [8, 12, 16, 48],
        "max_seq_length": 48, "max_steps": 4, "corpus_chars": 100_000, "heldout_chars": 30_000,
        "finetune_tasks": [{"name": "SST-2", "max_train": 64, "epochs": 1}]}
MINE_TOML = """base = "smoke"
hidden_size = 48
num_heads = 4
embedding_sizes = [8, 12, 16, 48]
max_seq_length = 48
max_steps = 4
corpus_chars = 100_000
heldout_chars = 30_000

[[finetune_tasks]]
name = "SST-2"
max_train = 64
epochs = 1
"""


def _write(path, data) -> str:
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return str(path)


def _ablate(scale: str, corpus, out, *more: str) -> list[str]:
    return ["ablate", "--grid", "table5", "--scale", scale, "--corpus", str(corpus), "--out", str(out),
            "--glue-dir", str(shared_path("glue")), *more]


# ------------------------------------------------------------------------------------------------ reading
def test_a_toml_and_a_json_scale_file_resolve_to_the_same_scale(tmp_path):
    toml = read_scale_file(_write(tmp_path / "mine.toml", MINE_TOML))
    js = get_scale(_write(tmp_path / "mine.json", MINE))
    assert asdict(toml) == {**asdict(js), "file": str(tmp_path / "mine.toml")}
    assert (js.name, js.hidden_size, js.num_heads, js.max_seq_length, js.embedding_sizes, js.max_steps) == \
        ("smoke", 48, 4, 48, (8, 12, 16, 48), 4)
    assert js.num_layers == SCALES["smoke"].num_layers and js.lr == SCALES["smoke"].lr   # the base's where unset
    assert js.finetune_tasks[0].name == "sst2" and js.finetune_tasks[0].dir_name == "SST-2"   # GLUE's spelling read
    assert js.finetune_tasks[0].epochs == 1.0 and isinstance(js.finetune_tasks[0].epochs, float)
    assert js.notes == "" and js.file == str(tmp_path / "mine.json")     # not smoke's "plumbing only"
    assert js.to_dict()["file"] == js.file and js.to_dict()["tokens_per_run"] == 4 * 8 * 48


def test_named_scales_keep_their_record_byte_for_byte():
    """suite.json of a suite run before scale files existed is compared with `Scale.to_dict`: a named scale's has
    no `file` key and the same keys as before, so such a suite continues as it did."""
    before = ["name", "hidden_size", "num_layers", "num_heads", "embedding_sizes", "vocab_size", "max_seq_length",
              "max_steps", "batch_size", "lr", "optimizer", "warmup_ratio", "masking", "dupe_factor", "seeds",
              "eval_batches", "eval_every", "precision", "micro_batch_size", "dropout", "finetune_tasks",
              "finetune_lr", "finetune_batch_size", "finetune_seq_length", "finetune_seeds", "corpus_chars",
              "heldout_chars", "device", "notes", "tokens_per_run"]
    for name in SCALES:
        assert list(get_scale(name).to_dict()) == before
        assert list(get_scale(name, max_steps=3).to_dict()) == before


def test_the_option_says_it_takes_a_name_or_a_file(capsys):
    with pytest.raises(SystemExit):
        main(["ablate", "--help"])
    assert "[--scale NAME|FILE]" in " ".join(capsys.readouterr().out.split())


# one line each: the file, the field, what it must be
BAD = [
    ({"base": "smoke", "hiden_size": 64}, ["unknown field 'hiden_size'", "did you mean hidden_size?"]),
    ({"base": "smoke", "ffn_size": 64}, ["unknown field 'ffn_size'", "4 x hidden_size"]),
    ({"base": "smoke", "tokens_per_run": 64}, ["tokens_per_run", "max_steps x batch_size x max_seq_length"]),
    ({"base": "smoke", "sharing": "all"}, ["unknown field 'sharing'", "grid variant"]),
    ({"hidden_size": 64}, ["base: missing", "smoke, cpu, gpu"]),
    ({"base": "cpuu"}, ["base: must be one of", "did you mean cpu?"]),
    ({"base": "smoke", "hidden_size": "64"}, ["hidden_size must be an integer >= 1", '"64" (a string)']),
    ({"base": "smoke", "max_steps": True}, ["max_steps must be an integer >= 1", "true (true/false)"]),
    ({"base": "smoke", "max_steps": 0}, ["max_steps must be an integer >= 1, got 0"]),
    ({"base": "smoke", "lr": 0}, ["lr must be a finite number > 0"]),
    ({"base": "smoke", "hidden_size": 64}, ["embedding_sizes: the last must be H = hidden_size = 64",
                                            "[8, 12, 16, 32] (smoke's)", "e.g. [5, 11, 21, 64]"]),
    ({"base": "smoke", "embedding_sizes": [8, 12, 16]}, ["embedding_sizes must be a list of 4 increasing"]),
    ({"base": "smoke", "num_heads": 3}, ["num_heads: 3 heads do not divide H = hidden_size = 32"]),
    ({"base": "smoke", "max_seq_length": 4}, ["max_seq_length must be an integer in [8, 65535]", "got 4"]),
    ({"base": "smoke", "max_seq_length": 16}, ["finetune_seq_length: 32 is longer", "T = max_seq_length = 16"]),
    ({"base": "smoke", "optimizer": "adam"}, ["optimizer must be one of lamb, adamw, adamweightdecay",
                                              "did you mean adamw?"]),
    ({"base": "smoke", "masking": "word"}, ["masking must be one of ngram, token"]),
    ({"base": "smoke", "precision": "fp64"}, ["precision must be one of fp32, bf16, fp16"]),
    ({"base": "smoke", "device": "gpu"}, ["device must be auto, cpu, cuda or cuda:N"]),
    ({"base": "smoke", "seeds": [1, 1]}, ["seeds must be a list of distinct integers"]),
    ({"base": "smoke", "micro_batch_size": 3}, ["micro_batch_size: batch_size 8 is not a multiple of"]),
    ({"base": "smoke", "finetune_tasks": "sst2"}, ["finetune_tasks must be a list of tasks", "[] for none"]),
    ({"base": "smoke", "finetune_tasks": [{"name": "sst"}]}, ["finetune_tasks[0].name: unknown GLUE task 'sst'"]),
    ({"base": "smoke", "finetune_tasks": [{"name": "ax"}]}, ["finetune_tasks[0].name: ax", "no training data"]),
    ({"base": "smoke", "finetune_tasks": [{"name": "rte", "epoch": 2}]},
     ["finetune_tasks[0]: unknown field 'epoch'", "did you mean epochs?"]),
    ({"base": "smoke", "finetune_tasks": [{"name": "rte"}, {"name": "RTE"}]}, ["rte is given twice"]),
    ({"base": "smoke", "finetune_tasks": [{"name": "rte", "max_train": -1}]}, ["finetune_tasks[0].max_train"]),
    ({"base": "smoke", "finetune_tasks": [{"name": "rte", "dir_name": "../RTE"}]}, ["finetune_tasks[0].dir_name"]),
    ('base = "smoke"\nmax_steps = 5\nmax_steps = 6\n', ["not valid TOML"]),
    ('["smoke"]', ["a scale file is a table"]),
    ({"base": ["cpu"]}, ['base: must be one of smoke, cpu, gpu, cpu-v1, cpu-v2, got ["cpu"]']),   # was a TypeError
    ('base = "smoke"\nlr = 1979-05-27\n', ['lr must be a finite number > 0, got "1979-05-27" (date)']),
    ('{"base": "smoke", "lr": NaN}', ["lr must be a finite number > 0, got NaN"]),
    ({"base": "smoke", "precision": "fp16", "device": "cpu"}, ["precision: fp16 needs a CUDA device"]),
]


@pytest.mark.parametrize("data, phrases", BAD, ids=[str(i) for i in range(len(BAD))])
def test_a_bad_scale_file_is_one_line_naming_the_file_and_the_field(tmp_path, capsys, data, phrases):
    path = _write(tmp_path / ("bad.toml" if isinstance(data, str) and "=" in data else "bad.json"), data)
    assert_one_error(capsys, main(_ablate(path, _tiny_corpus(tmp_path), tmp_path / "o", "--list-jobs")),
                     f"{path}: ", *phrases)
    assert not (tmp_path / "o").exists()


def test_a_scale_name_that_is_neither_is_one_line(tmp_path, capsys):
    corpus = _tiny_corpus(tmp_path)
    assert_one_error(capsys, main(_ablate("cpu2", corpus, tmp_path / "o")), "unknown scale 'cpu2'",
                     "or give a scale file")
    assert_one_error(capsys, main(_ablate(str(tmp_path / "none.toml"), corpus, tmp_path / "o")),
                     "none.toml", "no such file")
    assert_one_error(capsys, main(_ablate(_write(tmp_path / "s.yaml", "base: cpu"), corpus, tmp_path / "o")),
                     "TOML or JSON, not YAML")


def test_a_files_missing_task_folder_and_vocabulary_beside_a_tokenizer_are_refused(tmp_path, capsys):
    corpus = _tiny_corpus(tmp_path)
    glue = tmp_path / "glue"
    shutil.copytree(shared_path("glue", "SST-2"), glue / "SST-2")
    path = _write(tmp_path / "s.json", {"base": "smoke", "finetune_tasks": [{"name": "sst2"}, {"name": "rte"}]})
    argv = _ablate(path, corpus, tmp_path / "o")
    argv[argv.index("--glue-dir") + 1] = str(glue)
    assert_one_error(capsys, main(argv), "no RTE folder", f"{path}'s finetune_tasks")
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *"abcdefghij"]) + "\n")
    sized = _write(tmp_path / "v.json", {"base": "smoke", "vocab_size": 500})
    assert_one_error(capsys, main(_ablate(sized, corpus, tmp_path / "o", "--tokenizer", str(vocab))),
                     f"{sized}: vocab_size", "--tokenizer", "give one of them")
    assert not (tmp_path / "o").exists()


# ---------------------------------------------------------------------------------------- end to end, resume
@pytest.fixture(scope="module")
def mine(tmp_path_factory):
    """A suite run end to end at a scale file changing H and T (one variant: a pretraining and its baseline)."""
    tmp = tmp_path_factory.mktemp("ablscale")
    corpus = _alice_corpus(tmp)
    grid = _write(tmp / "grid.json", [{"embedding": 128, "sharing": "all"}])
    scale = _write(tmp / "mine.json", MINE)
    argv = _ablate(scale, corpus, tmp / "out", "--threads", "1")
    argv[argv.index("--grid") + 1] = grid
    assert main(argv) == 0
    return tmp, argv


def test_a_scale_file_changing_h_and_t_runs_end_to_end(mine):
    tmp, _ = mine
    out = tmp / "out"
    config = json.loads(next((out / "runs" / "E128-all-sop-s1" / "checkpoints").glob("*/config.json")).read_text())
    assert (config["hidden_size"], config["num_heads"], config["max_position_embeddings"], config["ffn_size"],
            config["embedding_size"]) == (48, 4, 48, 192, 12)
    assert json.loads((out / "prepared" / "data" / "train_sop" / "meta.json").read_text())["max_seq_length"] == 48
    recorded = json.loads((out / "suite.json").read_text())["scale"]
    assert recorded == json.loads(json.dumps(get_scale(str(tmp / "mine.json")).to_dict()))
    assert recorded["file"] == str(tmp / "mine.json") and recorded["name"] == "smoke"
    result = json.loads((out / "runs" / "E128-all-sop-s1" / "result.json").read_text())
    assert 0.0 <= result["finetune"]["sst2"]["score"] <= 1.0
    report = (out / "report.md").read_text()
    assert "H=48, L=2, A=4, I=192, V=400, T=48, 4 steps x 8 sequences" in report
    assert f"Scale **smoke** as changed by the scale file `{tmp / 'mine.json'}`: H=48" in report   # lead: names it
    assert "SST-2 (64 train examples, 1.0 epochs)" in report


def test_list_jobs_names_the_scale_file_and_its_values(mine, capsys):
    tmp, argv = mine
    capsys.readouterr()
    assert main([*argv, "--list-jobs"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"scale file {tmp / 'mine.json'}, base smoke; changed: hidden_size=48 (smoke: 32), "
                               f"num_heads=4 (smoke: 2)")
    assert lines[1].startswith("scale values: hidden_size=48, num_layers=2, num_heads=4, embedding_sizes=[8, 12, 16, "
                               "48], vocab_size=400, max_seq_length=48, max_steps=4, batch_size=8")
    assert lines[-1] == "2 jobs: 2 done, 0 to fine-tune again, 0 to resume, 0 to run"


def test_the_scale_file_edited_is_compared_as_a_named_scale_with_overrides(mine, capsys):
    """The file edited in place: another H is another scale (refused); another fine-tuning protocol needs
    --refinetune, which fine-tunes the kept models again (listed as `fine-tune`); nothing is written."""
    tmp, argv = mine
    path = tmp / "mine.json"
    before = (tmp / "out" / "suite.json").read_text()
    try:
        _write(path, {**MINE, "hidden_size": 64, "embedding_sizes": [8, 12, 16, 64]})
        capsys.readouterr()
        assert_one_error(capsys, main([*argv, "--list-jobs"]), "holds a suite run at another scale",
                         "hidden_size: 48 there, 64 now")
        _write(path, {**MINE, "finetune_tasks": [{"name": "sst2", "max_train": 64, "epochs": 2}]})
        assert_one_error(capsys, main([*argv, "--list-jobs"]), "fine-tuned with another protocol",
                         "sst2 epochs: 1.0 there, 2.0 now", "--refinetune")
        assert main([*argv, "--list-jobs", "--refinetune"]) == 0
        assert capsys.readouterr().out.splitlines()[-1] == "2 jobs: 0 done, 2 to fine-tune again, 0 to resume, 0 to run"
    finally:
        _write(path, MINE)
    assert (tmp / "out" / "suite.json").read_text() == before


def test_a_named_scale_with_the_same_values_continues_the_suite(mine, capsys):
    """The file's scale is smoke with overrides: `--scale smoke` with --max-steps 4 is not the same (H 32), and a
    suite run at smoke with overrides continues under a file holding those values (nothing is recorded twice)."""
    tmp, argv = mine
    named = [*argv, "--list-jobs"]
    named[named.index("--scale") + 1] = "smoke"
    capsys.readouterr()
    assert_one_error(capsys, main([*named, "--max-steps", "4"]), "another scale", "hidden_size: 48 there, 32 now")


def test_a_renamed_copy_of_the_scale_file_continues_the_suite(mine, capsys, tmp_path):
    tmp, argv = mine
    copy = _write(tmp_path / "renamed.toml", MINE_TOML)
    again = [*argv, "--list-jobs"]
    again[again.index("--scale") + 1] = copy
    capsys.readouterr()
    assert main(again) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "2 jobs: 2 done, 0 to fine-tune again, 0 to resume, 0 to run"


def test_a_suite_of_a_named_scale_continues_under_a_file_of_its_values(tmp_path, capsys):
    """A suite whose suite.json was written for `--scale smoke --max-steps 4` (no `file`: as HEAD wrote it) and a
    finished job: a scale file `base = "smoke"`, `max_steps = 4` is the same scale; one with max_steps 5 is not."""
    from albertlm.experiments.runner import make_suite, merged_plan, plan_jobs
    from test_ablate_audit13 import _fake_finished

    corpus = _tiny_corpus(tmp_path)
    suite = make_suite(tmp_path / "o", get_scale("smoke", max_steps=4), "table5", corpus, shared_path("glue"))
    jobs = plan_jobs(suite.runs)
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "suite.json").write_text(json.dumps(merged_plan(suite, jobs)))
    assert "file" not in json.loads((tmp_path / "o" / "suite.json").read_text())["scale"]
    _fake_finished(suite, jobs[0])
    done = tmp_path / "o" / jobs[0].directory / "result.json"   # fine-tuned too, as the runner records it
    done.write_text(json.dumps({**json.loads(done.read_text()), "finetune": {"sst2": {"seeds": [1], "score": 0.5}}}))
    same = _write(tmp_path / "same.toml", 'base = "smoke"\nmax_steps = 4\n')
    capsys.readouterr()
    assert main(_ablate(same, corpus, tmp_path / "o", "--list-jobs")) == 0
    assert "1 done" in capsys.readouterr().out.splitlines()[-1]
    other = _write(tmp_path / "other.toml", 'base = "smoke"\nmax_steps = 5\n')
    assert_one_error(capsys, main(_ablate(other, corpus, tmp_path / "o", "--list-jobs")),
                     "another scale (max_steps: 4 there, 5 now")


def test_overrides_on_the_command_line_change_the_files_scale(tmp_path):
    path = _write(tmp_path / "s.toml", MINE_TOML)
    scale = get_scale(path, max_steps=7, finetune_lr=0.01)
    assert (scale.max_steps, scale.finetune_lr, scale.hidden_size, scale.file) == (7, 0.01, 48, path)
    with pytest.raises(UserError, match="unknown scale 'gpu2'"):
        get_scale("gpu2")
