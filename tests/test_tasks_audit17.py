"""Task specs: `predict race --data-dir RACE/train` names its split train (it was called dev, in file names and
problem notes); `--levels middle,middle` is recorded once."""
from __future__ import annotations

import json

from albertlm.config.task import FinetuneConfig
from albertlm.tasks.options import RaceOptions
from albertlm.tasks.specs import race_spec
from conftest import shared_path


class CharTokenizer:
    pad_id, cls_id, sep_id = 0, 2, 3

    def encode_batch(self, texts):
        return [[5 + ord(c) - 97 if "a" <= c <= "z" else 31 for c in t.lower()] for t in texts]


def test_a_split_directory_is_named_by_itself_train_included():
    root = shared_path("race", "RACE")
    cfg = FinetuneConfig(max_seq_length=64)
    for split in ("train", "dev"):
        spec = race_spec(root / split, CharTokenizer(), cfg, training=False)
        assert [s.name for s in spec.eval_sets] == [split]


def test_a_level_named_twice_is_one_level():
    assert RaceOptions(levels="middle, middle,high").level_list() == ("middle", "high")


def _mnli_dev(path, labels):
    header = ["index", "promptID", "pairID", "genre", "s1bp", "s2bp", "s1p", "s2p", "sentence1", "sentence2",
              "label1", "gold_label"]
    rows = [[str(i), "0", "0", "fiction", "", "", "", "", f"premise {i}", f"hypothesis {i}", label, label]
            for i, label in enumerate(labels)]
    path.write_text("\n".join("\t".join(r) for r in [header, *rows]) + "\n")


def test_scoring_mnli_predictions_picks_the_dev_file_they_are_of(tmp_path, capsys):
    """A --data-dir of MNLI holds the matched and mismatched dev files: predictions were scored against the first
    (matched) whatever they were of: wrong numbers for files of equal length. Now by the name `predict` gives."""
    from albertlm.cli.main import main

    _mnli_dev(tmp_path / "dev_matched.tsv", ["entailment", "neutral", "contradiction", "entailment"])
    _mnli_dev(tmp_path / "dev_mismatched.tsv", ["neutral", "neutral", "neutral", "neutral"])
    for name, labels in (("dev_mismatched_predictions.tsv", ["neutral"] * 4),
                         ("dev_matched_predictions.tsv", ["entailment", "neutral", "contradiction", "entailment"])):
        (tmp_path / name).write_text("index\tprediction\n" + "".join(f"{i}\t{l}\n" for i, l in enumerate(labels)))
        assert main(["evaluate", "glue", "--task", "mnli", "--data-dir", str(tmp_path),
                     "--predictions", str(tmp_path / name)]) == 0
        assert json.loads(capsys.readouterr().out) == {"accuracy": 1.0}
    (tmp_path / "preds.tsv").write_text((tmp_path / "dev_matched_predictions.tsv").read_text())
    assert main(["evaluate", "glue", "--task", "mnli", "--data-dir", str(tmp_path),
                 "--predictions", str(tmp_path / "preds.tsv")]) == 2
    err = capsys.readouterr().err
    assert "scores one dev file" in err and "dev_mismatched.tsv" in err and "--dev FILE" in err
