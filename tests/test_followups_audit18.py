"""Follow-ups of the eighteenth session's audits, in files whose owners had finished: fill-mask on a model wider
than its tokenizer, `--preset` against a --config file of another preset, negative numbers in scientific
notation as option values, and albertlm's own warnings as one line from the console command."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from albertlm.cli.main import main
from conftest import ROOT, assert_one_error, shared_path


def test_fill_mask_on_a_model_wider_than_its_tokenizer_ranks_only_the_tokenizers_ids():
    """A model of 30100 rows with the 30000-piece tokenizer (`check_tokenizer_fits` allows it): when a padded row
    scored best, `id_to_token` raised an IndexError traceback (SentencePiece). Now only real ids are ranked, with
    their probabilities over the whole vocabulary, as transformers' pipeline computes them."""
    from albertlm.config import ModelConfig
    from albertlm.model.heads import AlbertForMaskedLM
    from albertlm.tasks.inference import FillMask
    from albertlm.tokenization import load_tokenizer

    tokenizer = load_tokenizer(shared_path("spm", "albert-base-v2_spiece.model"))
    assert tokenizer.vocab_size == 30000
    torch.manual_seed(0)
    model = AlbertForMaskedLM(ModelConfig(vocab_size=30100, embedding_size=8, hidden_size=16, num_layers=1,
                                          num_heads=2, ffn_size=16, max_position_embeddings=32)).eval()
    with torch.no_grad():
        model.mlm_head.bias[30000:] = 50.0        # the padded rows win by far
        model.mlm_head.bias[7] = 20.0            # the best real id
    predictions = FillMask(model, tokenizer)(["the [MASK] sat"], top_k=3)[0][0]
    assert [p["token_id"] for p in predictions][0] == 7, predictions
    assert all(p["token_id"] < 30000 and isinstance(p["token"], str) for p in predictions)
    # probabilities of the whole vocabulary: the 100 padded rows hold nearly all of it
    assert predictions[0]["score"] < 1e-6, predictions


def _write(path, data) -> str:
    path.write_text(json.dumps(data))
    return str(path)


def test_a_preset_given_with_a_config_file_of_another_presets_model_is_refused(tmp_path, capsys):
    """`--preset albert-base --config saved_run_config.json`: the file's model fields won over the preset, so the
    run trained the file's model while run_config.json said albert-base. A file of tweaks without a preset still
    refines --preset."""
    other = _write(tmp_path / "other.json", {"preset": "albert-large", "model": {"num_layers": 3, "hidden_size": 64}})
    code = main(["pretrain", "--data", str(tmp_path / "missing"), "--out", str(tmp_path / "run"),
                 "--preset", "albert-base", "--config", other])
    assert_one_error(capsys, code, "--preset albert-base", "preset albert-large", "model.num_layers")
    assert not (tmp_path / "run").exists()
    tweaks = _write(tmp_path / "tweaks.json", {"model": {"num_layers": 3}})
    code = main(["pretrain", "--data", str(tmp_path / "missing"), "--out", str(tmp_path / "run"),
                 "--preset", "albert-base", "--config", tweaks])
    err = capsys.readouterr().err
    assert code != 0 and "not a data directory" in err, err   # past the preset check, on to the missing data


@pytest.mark.parametrize("value", ["-1e-3", "-2.5E+4", "-.5"])
def test_a_negative_number_in_scientific_notation_is_an_option_value(tmp_path, capsys, value):
    """`--lr -1e-3` said "--lr/--optim.lr: expected one argument" (argparse took -1e-3 for an option); now the
    value reaches the config's own check."""
    code = main(["pretrain", "--data", str(tmp_path / "missing"), "--out", str(tmp_path / "run"), "--lr", value])
    assert_one_error(capsys, code, "optim.lr=", "must be positive")


def test_the_console_command_says_albertlms_own_warnings_in_one_line(tmp_path):
    """A Korean vocab.txt loaded with accent stripping (albertlm's UserWarning) by `albertlm data build`: Python
    printed two lines quoting our source file (`load.py:58: UserWarning: ...`, then the source line)."""
    hangul = [chr(0xAC00 + k) for k in range(150)]
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *hangul]) + "\n", encoding="utf-8")
    text = tmp_path / "in.txt"
    text.write_text(("가나다 라마바. 사아자 차카타.\n" * 3 + "\n") * 20, encoding="utf-8")
    paths = [str(ROOT / "src"), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}     # this checkout's code, whatever is installed
    env.pop("PYTHONWARNINGS", None)                                  # Python's default filters: the warning shows
    proc = subprocess.run([sys.executable, "-m", "albertlm", "data", "build", "--input", str(text), "--tokenizer",
                           str(vocab), "--out", str(tmp_path / "d"), "--max-seq-length", "32", "--no-progress"],
                          capture_output=True, encoding="utf-8", errors="replace", env=env, cwd=tmp_path,
                          stdin=subprocess.DEVNULL, timeout=300)
    assert proc.returncode == 0, proc.stderr
    said = [line for line in proc.stderr.splitlines() if "Hangul" in line]
    assert len(said) == 1 and said[0].startswith("albertlm data: warning: "), proc.stderr
    assert "UserWarning" not in proc.stderr and "load.py" not in proc.stderr, proc.stderr


def test_squad_v2_counts_a_question_with_an_empty_gold_text_as_answerable_as_the_official_script():
    """evaluate-v2.0.py's HasAns is `bool(qa['answers'])`: a question whose only gold text is "" is HasAns (its
    gold becomes "" for the scores). It was counted NoAns, which moved it between HasAns_* and NoAns_*."""
    from albertlm.tasks import metrics

    golds = {"q1": ["Paris"], "q2": [""], "q3": []}
    out = metrics.squad_v2_scores(golds, {"q1": "Paris", "q2": "", "q3": ""})
    assert out["HasAns_total"] == 2 and out["NoAns_total"] == 1, out
    assert out["exact"] == 100.0 and out["HasAns_exact"] == 100.0, out


def _tiny_pretrained(out, vocab_size: int):
    from albertlm.config import ModelConfig
    from albertlm.model.albert import AlbertForPreTraining

    torch.manual_seed(0)
    AlbertForPreTraining(ModelConfig(vocab_size=vocab_size, embedding_size=8, hidden_size=16, num_layers=1,
                                     num_heads=2, ffn_size=16, max_position_embeddings=32)).save_pretrained(out)
    return out


def test_a_wordpiece_export_names_its_own_cls_and_sep_in_config_json(tmp_path, capsys):
    """An albert_zh-style model (WordPiece: [CLS] 101, [SEP] 102) exported to transformers said bos 2 / eos 3, the
    ids of ALBERT's SentencePiece vocabulary."""
    from albertlm.tokenization import load_tokenizer

    vocab = shared_path("vocab", "albert_zh_vocab.txt")
    tokenizer = load_tokenizer(vocab)
    src = _tiny_pretrained(tmp_path / "zh", tokenizer.vocab_size)
    assert main(["convert", str(src), str(tmp_path / "hf"), "--to", "hf", "--tokenizer", str(vocab)]) == 0
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert (config["bos_token_id"], config["eos_token_id"]) == (tokenizer.cls_id, tokenizer.sep_id) == (101, 102)


def test_a_bpe_sentencepiece_export_warns_that_transformers_reads_it_otherwise(tmp_path, capsys):
    """A BPE spiece.model exported to transformers: the summary said "transformers reads spiece.model", as if the
    ids were the same; transformers 5 reads it as a unigram model and gives other ids on most lines."""
    text = shared_path("text", "sample_text.txt")
    assert main(["tokenizer", "train", "--input", str(text), "--out", str(tmp_path / "bpe"), "--vocab-size", "300",
                 "--model-type", "bpe"]) == 0
    src = _tiny_pretrained(tmp_path / "m", 300)
    capsys.readouterr()
    assert main(["convert", str(src), str(tmp_path / "hf"), "--to", "hf", "--tokenizer",
                 str(tmp_path / "bpe" / "spiece.model")]) == 0
    out = capsys.readouterr()
    said = [line for line in (out.out + out.err).splitlines() if "BPE" in line]
    assert said and "warning" in said[0] and "unigram" in said[0], out


def test_plot_takes_the_metrics_file_for_its_run(tmp_path, capsys):
    """`albertlm plot run/metrics.jsonl` said "expected run/metrics.jsonl/metrics.jsonl"; the file names its run."""
    run = tmp_path / "run"
    run.mkdir()
    records = [{"step": k, "split": "train", "loss": 5.0 - k, "lr": 1e-3, "tokens_per_s": 100.0} for k in (1, 2, 3)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert main(["plot", str(run / "metrics.jsonl")]) == 0, capsys.readouterr().err
    assert (run / "curves.png").stat().st_size > 0


def test_a_prediction_id_given_twice_is_refused(tmp_path, capsys):
    """`evaluate classify --predictions`: a second line for one id replaced the first without a word."""
    gold = tmp_path / "dev.csv"
    gold.write_text("id,text,label\na,good,pos\nb,bad,neg\n")
    preds = tmp_path / "preds.tsv"
    preds.write_text("id\tprediction\na\tpos\nb\tneg\na\tneg\n")
    code = main(["evaluate", "classify", "--predictions", str(preds), "--data", str(gold), "--id-column", "id"])
    assert_one_error(capsys, code, "preds.tsv:4", "second prediction for id a")


def test_a_header_naming_a_column_twice_is_refused(tmp_path):
    """`text,text,label`: each record kept the last `text` column, silently. Empty names (trailing commas of a
    spreadsheet export) may repeat."""
    from albertlm.tasks.tables import DataError, read_records

    twice = tmp_path / "twice.csv"
    twice.write_text("text,text,label\nfirst,second,pos\n")
    with pytest.raises(DataError, match="names the column 'text' twice"):
        list(read_records(twice))
    trailing = tmp_path / "trailing.csv"
    trailing.write_text("text,label,,\ngood,pos,,\n")
    assert [record["text"] for _, record in read_records(trailing)] == ["good"]


def test_params_shows_a_preset_named_twice_once(capsys):
    assert main(["params", "--preset", "albert-base", "--preset", "albert-base", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 1, rows
