"""`albertlm convert`: every direction through main(argv), the summary, tokenizer files, one-line errors."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from albertlm.cli.main import main
from albertlm.config import ModelConfig
from albertlm.model.albert import AlbertForPreTraining

FIXTURE = Path(__file__).parent / "fixtures" / "tf_albert_tiny"


def convert(capsys, *argv) -> tuple[int, str, str]:
    code = main(["convert", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def assert_same_weights(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for key in sa:
        assert torch.equal(sa[key], sb[key]), key


def tf_copy(tmp_path: Path) -> Path:
    """The fixture checkpoint beside google's tarball names (albert_config.json, 30k-clean.model)."""
    src = tmp_path / "albert_tiny"
    src.mkdir()
    for f in FIXTURE.iterdir():
        if f.is_file() and f.name.startswith(("model.ckpt", "albert_config")):
            shutil.copyfile(f, src / f.name)
    (src / "30k-clean.model").write_bytes(b"sentencepiece model bytes")
    return src


def test_tf_to_albertlm_to_hf_and_back(capsys, tmp_path):
    src = tf_copy(tmp_path)
    code, out, err = convert(capsys, src, tmp_path / "ours")
    assert code == 0, err
    assert "(tf) ->" in out and "parameters: 18,575" in out
    assert "48 variables imported, 5 training-state variables skipped" in out
    assert (tmp_path / "ours" / "spiece.model").read_bytes() == b"sentencepiece model bytes"
    ours = AlbertForPreTraining.from_pretrained(tmp_path / "ours")

    code, out, err = convert(capsys, tmp_path / "ours", tmp_path / "hf", "--to", "hf")
    assert code == 0, err
    assert "no missing or unexpected keys" in out
    assert (tmp_path / "hf" / "spiece.model").is_file()  # tokenizer files travel along

    code, out, err = convert(capsys, tmp_path / "hf", tmp_path / "ours2")
    assert code == 0, err
    assert "(hf) ->" in out
    assert_same_weights(ours, AlbertForPreTraining.from_pretrained(tmp_path / "ours2"))


def test_tf_prefix_straight_to_hf(capsys, tmp_path):
    transformers = pytest.importorskip("transformers")
    code, out, err = convert(capsys, FIXTURE / "model.ckpt-0", tmp_path / "hf", "--to", "hf", "--verify")
    assert code == 0, err
    model, info = transformers.AlbertForPreTraining.from_pretrained(tmp_path / "hf", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert model.config.num_hidden_groups == 2 and model.config.hidden_act == "gelu_new"


def test_explicit_config_and_tokenizer(capsys, tmp_path):
    src = tmp_path / "ckpt"
    src.mkdir()
    for f in FIXTURE.glob("model.ckpt-0.*"):
        shutil.copyfile(f, src / f.name)
    vocab = tmp_path / "my_vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\n")
    code, out, err = convert(capsys, src, tmp_path / "out", "--config", FIXTURE / "albert_config.json",
                             "--tokenizer", vocab)
    assert code == 0, err
    assert (tmp_path / "out" / "vocab.txt").read_text() == "[PAD]\n[UNK]\n"


@pytest.mark.parametrize("case", ["missing-src", "not-a-model", "same-format", "config-for-hf", "dst-taken",
                                  "no-config", "wrong-config", "bad-tokenizer"])
def test_errors_are_one_line_exit_2(case, capsys, tmp_path):
    ours = tmp_path / "ours"
    AlbertForPreTraining(ModelConfig(vocab_size=99, embedding_size=16, hidden_size=32, num_layers=2, num_heads=4,
                                     ffn_size=37, max_position_embeddings=64)).save_pretrained(ours)
    (tmp_path / "empty").mkdir()
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    for f in FIXTURE.glob("model.ckpt-0.*"):
        shutil.copyfile(f, ckpt / f.name)
    argv, needle = {
        "missing-src": ([tmp_path / "nope", tmp_path / "out"], "no such file"),
        "not-a-model": ([tmp_path / "empty", tmp_path / "out"], "not a model"),
        "same-format": ([ours, tmp_path / "out"], "nothing to convert"),
        "config-for-hf": ([ours, tmp_path / "out", "--to", "hf", "--config", "x.json"], "only for TF"),
        "dst-taken": ([FIXTURE, ours], "--force"),
        "no-config": ([ckpt, tmp_path / "out"], "no albert_config.json"),
        "wrong-config": ([FIXTURE, tmp_path / "out", "--config", FIXTURE / "inner2" / "albert_config.json"],
                         "does not fit"),
        "bad-tokenizer": ([FIXTURE, tmp_path / "out", "--tokenizer", tmp_path / "none.model"], "no such file"),
    }[case]
    code, out, err = convert(capsys, *argv)
    assert code == 2
    assert err.startswith("albertlm convert: error: ") and err.count("\n") == 1, err
    assert needle in err and "Traceback" not in err


def test_unexportable_sharing_is_refused(capsys, tmp_path):
    cfg = ModelConfig(vocab_size=99, embedding_size=16, hidden_size=32, num_layers=2, num_heads=4, ffn_size=37,
                      max_position_embeddings=64, sharing="attention")
    AlbertForPreTraining(cfg).save_pretrained(tmp_path / "ours")
    code, out, err = convert(capsys, tmp_path / "ours", tmp_path / "hf", "--to", "hf")
    assert code == 2 and "sharing='attention'" in err and err.count("\n") == 1


def test_force_overwrites(capsys, tmp_path):
    assert convert(capsys, FIXTURE, tmp_path / "out")[0] == 0
    assert convert(capsys, FIXTURE, tmp_path / "out")[0] == 2
    assert convert(capsys, FIXTURE, tmp_path / "out", "--force")[0] == 0


def test_bad_choice_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["convert", "a", "b", "--to", "tf"])
    assert exc.value.code == 2


def test_a_bad_tokenizer_is_refused_before_anything_is_written(capsys, tmp_path):
    """A missing --tokenizer, or one with more pieces than the model has rows, leaves DST untouched (a retry
    with the right file needs no --force)."""
    from conftest import shared_path

    ours = tmp_path / "ours"
    AlbertForPreTraining(ModelConfig(vocab_size=99, embedding_size=16, hidden_size=32, num_layers=2, num_heads=4,
                                     ffn_size=37, max_position_embeddings=64)).save_pretrained(ours)
    code, _, err = convert(capsys, ours, tmp_path / "hf", "--to", "hf", "--tokenizer", tmp_path / "none.model")
    assert code == 2 and "no such file" in err and not (tmp_path / "hf").exists()
    big = shared_path("spm", "test_sentencepiece.model")
    code, _, err = convert(capsys, ours, tmp_path / "hf", "--to", "hf", "--tokenizer", big)
    assert code == 2 and "has 1000 pieces but the model's vocabulary is 99" in err and err.count("\n") == 1
    assert not (tmp_path / "hf" / "config.json").exists()


def _classifier_config(**extra):
    transformers = pytest.importorskip("transformers")
    return transformers.AlbertConfig(vocab_size=99, embedding_size=16, hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=4, intermediate_size=37, max_position_embeddings=64, **extra)


def test_label_names_and_problem_type_survive_a_round_trip(capsys, tmp_path):
    transformers = pytest.importorskip("transformers")
    names = {0: "negative", 1: "neutral", 2: "positive"}
    cfg = _classifier_config(id2label=names, label2id={v: k for k, v in names.items()},
                             problem_type="single_label_classification")
    torch.manual_seed(0)
    transformers.AlbertForSequenceClassification(cfg).save_pretrained(tmp_path / "hf")
    assert convert(capsys, tmp_path / "hf", tmp_path / "ours")[0] == 0
    assert convert(capsys, tmp_path / "ours", tmp_path / "back", "--to", "hf")[0] == 0
    back = transformers.AutoConfig.from_pretrained(tmp_path / "back")
    assert back.id2label == names and back.label2id == {v: k for k, v in names.items()}
    assert back.problem_type == "single_label_classification"


def test_a_fine_tuning_runs_labels_name_the_exported_classes(capsys, tmp_path):
    from albertlm.model.heads import AlbertForSequenceClassification

    best = tmp_path / "run" / "best"
    cfg = ModelConfig(vocab_size=99, embedding_size=16, hidden_size=32, num_layers=2, num_heads=4, ffn_size=37,
                      max_position_embeddings=64, num_labels=2)
    AlbertForSequenceClassification(cfg).save_pretrained(best)
    (tmp_path / "run" / "task.json").write_text('{"family": "classify", "labels": ["neg", "pos"], '
                                               '"regression": false}')
    assert convert(capsys, best, tmp_path / "hf", "--to", "hf")[0] == 0
    import json

    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["id2label"] == {"0": "neg", "1": "pos"} and config["label2id"] == {"neg": 0, "pos": 1}
    assert config["problem_type"] == "single_label_classification"


def test_exported_tokenizer_gives_segment_ids_of_a_pair(capsys, tmp_path):
    """transformers 5's AlbertTokenizer leaves token_type_ids out unless tokenizer_config.json asks for them;
    without them a sentence-pair model runs its second segment as the first."""
    transformers = pytest.importorskip("transformers")
    from conftest import shared_path

    ours = tmp_path / "ours"
    AlbertForPreTraining(ModelConfig(vocab_size=30000, embedding_size=8, hidden_size=32, num_layers=2, num_heads=4,
                                     ffn_size=37, max_position_embeddings=64)).save_pretrained(ours)
    code, _, err = convert(capsys, ours, tmp_path / "hf", "--to", "hf", "--tokenizer",
                           shared_path("spm", "albert-base-v2_spiece.model"))
    assert code == 0, err
    encoded = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "hf"))("hello world", "second one")
    types = encoded["token_type_ids"]
    assert types[0] == 0 and types[-1] == 1 and sorted(types) == types


def test_a_google_config_without_hidden_act_is_googles_gelu():
    from albertlm.model.hf_format import config_from_hf

    google = {"vocab_size": 99, "embedding_size": 16, "hidden_size": 32, "num_hidden_layers": 2,
              "num_attention_heads": 4, "intermediate_size": 37, "max_position_embeddings": 64}
    assert config_from_hf(google).activation == "gelu_new"          # google's "gelu" is the tanh form
    assert config_from_hf({**google, "model_type": "albert"}).activation == "gelu_new"


def test_info_names_the_class_and_counts_its_heads(capsys, tmp_path):
    import json

    from albertlm.model.heads import AlbertForSequenceClassification

    cfg = ModelConfig(vocab_size=99, embedding_size=16, hidden_size=32, num_layers=2, num_heads=4, ffn_size=37,
                      max_position_embeddings=64, num_labels=3)
    model = AlbertForSequenceClassification(cfg)
    model.save_pretrained(tmp_path / "run" / "best")
    capsys.readouterr()
    assert main(["info", str(tmp_path / "run"), "--json"]) == 0        # a fine-tuning run: its best/
    info = json.loads(capsys.readouterr().out)
    assert info["model_class"] == "AlbertForSequenceClassification"
    assert info["stored_parameters"] == sum(p.numel() for p in model.parameters())
    assert info["directory"].endswith("best")


def test_model_card_facts_name_the_masking_and_the_kind_of_run(tmp_path):
    import json

    from albertlm.interop.hf import run_facts

    data = tmp_path / "data"
    data.mkdir()
    (data / "meta.json").write_text(json.dumps({"num_instances": 5, "max_seq_length": 64, "sentence_task": "sop",
                                                "masking": {"mode": "ngram", "max_ngram": 3}, "dupe_factor": 2}))
    for kind in ("pretraining", "fine-tuning"):
        run = tmp_path / kind
        step = run / "checkpoints" / "step_00000010"
        step.mkdir(parents=True)
        (run / "run_config.json").write_text(json.dumps({"data": {"path": str(data)}}))
        (run / "metrics.jsonl").write_text(json.dumps({"step": 10, "split": "eval", "loss": 1.5}) + "\n")
        if kind == "fine-tuning":
            (run / "task.json").write_text('{"family": "glue", "task": "rte"}')
        facts = run_facts(step)
        assert "masking `ngram`" in facts["data"][0]
        assert f"held-out evaluation during {kind} at step 10: loss 1.5000" in facts["metrics"][0]


def test_model_card_of_a_fine_tuned_best_reads_its_dev_scores_flat(tmp_path):
    import json

    from albertlm.interop.hf import run_facts

    best = tmp_path / "run" / "best"
    best.mkdir(parents=True)
    (tmp_path / "run" / "task.json").write_text('{"family": "glue", "task": "rte"}')
    (tmp_path / "run" / "metrics.jsonl").write_text(json.dumps({"step": 10, "split": "eval", "loss": 1.5}) + "\n")
    (tmp_path / "run" / "metrics.json").write_text(json.dumps({"family": "glue", "task": "rte",
                                                               "best": {"dev": {"accuracy": 0.5289}, "step": 10}}))
    assert run_facts(best)["metrics"] == ["- fine-tuning (glue, rte): best dev/accuracy 0.5289, step 10"]
    (tmp_path / "run" / "metrics.json").write_text("{}")            # interrupted: no best yet, no pretraining line
    assert "metrics" not in run_facts(best)


def test_a_users_readme_in_dst_needs_force(capsys, tmp_path):
    """convert --to hf writes README.md and tokenizer files too: a user's own are not replaced without --force."""
    ours = tmp_path / "ours"
    AlbertForPreTraining(ModelConfig(vocab_size=99, embedding_size=16, hidden_size=32, num_layers=2, num_heads=4,
                                     ffn_size=37, max_position_embeddings=64)).save_pretrained(ours)
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "README.md").write_text("# my notes")
    code, _, err = convert(capsys, ours, tmp_path / "proj", "--to", "hf")
    assert code == 2 and "README.md" in err and (tmp_path / "proj" / "README.md").read_text() == "# my notes"
