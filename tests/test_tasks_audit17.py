"""Task specs: `predict race --data-dir RACE/train` names its split train (it was called dev, in file names and
problem notes); `--levels middle,middle` is recorded once."""
from __future__ import annotations

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
