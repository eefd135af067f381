"""Audit 22: a cluster user who builds pretraining data in parts (`albertlm data build --num-shards K
--shard-index i` on K machines) and puts them together. Parts that read other text (each machine given its own
share of the files, a common mistake) were merged without a word although together they held a fraction of the
corpus; a masking difference was named as two cut-off JSON objects that hid the field; a missing part, a missing
or truncated shard and a damaged record in a part said too little to act on. Each test below failed before its
fix, except the last, which guards what a 2-rank run reads of a parts build."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from albertlm.cli.main import main
from albertlm.data.loader import PretrainingDataset, collate
from albertlm.data.shards import read_meta, record_dtype
from albertlm.errors import UserError
from conftest import alice_documents, assert_one_error, shared_path


def _part(inputs: list[Path], out: Path, index: int, *extra: str) -> None:
    """Part `index` of 2 of a small 32-token build (albert-base-v2's SentencePiece) into `out`."""
    code = main(["data", "build", "--input", *map(str, inputs), "--out", str(out), "--max-seq-length", "32",
                 "--dupe-factor", "1", "--chunk-chars", "2000", "--no-progress", "--num-shards", "2",
                 "--shard-index", str(index), "--tokenizer", str(shared_path("spm", "albert-base-v2_spiece.model")),
                 *extra])
    assert code == 0


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return alice_documents(tmp_path_factory.mktemp("corpus"), 160)


@pytest.fixture(scope="module")
def parts(corpus, tmp_path_factory) -> Path:
    """Both parts of one build of `corpus`, as two machines would write them into a shared directory."""
    out = tmp_path_factory.mktemp("parts") / "data"
    for index in (0, 1):
        _part([corpus], out, index)
    return out


def _with_part_1_from(parts: Path, tmp_path: Path, inputs: list[Path], *extra: str) -> Path:
    """A copy of part 0 of `parts` with a part 1 built elsewhere (from `inputs`, with `extra`) copied beside it."""
    other, mixed = tmp_path / "other", tmp_path / "mixed"
    _part(inputs, other, 1, *extra)
    shutil.copytree(parts, mixed, ignore=shutil.ignore_patterns("*part-00001-of-00002*"))
    for path in other.glob("*part-00001-of-00002*"):
        shutil.copy(path, mixed / path.name)
    return mixed


def test_parts_that_read_other_text_are_refused_when_read(parts, corpus, tmp_path, capsys):
    """Each machine given its own half of the files: every part keeps its share of the chunks of what *it* read,
    so the union missed about half of each half, and `data stats` and pretraining took it without a word."""
    half = tmp_path / "half"
    half.mkdir()
    lines = corpus.read_text().splitlines()
    (half / "b.txt").write_text("\n".join(lines[:50]) + "\n\n" + "\n".join(lines[50:100]) + "\n")
    mixed = _with_part_1_from(parts, tmp_path, [half / "b.txt"])
    assert '"num_instances": 0,' not in (tmp_path / "other" / "meta.part-00001-of-00002.json").read_text()
    capsys.readouterr()
    with pytest.raises(UserError) as caught:
        PretrainingDataset(mixed)
    said = str(caught.value)
    assert "meta.part-00001-of-00002.json" in said and "corpus " in said and "the same --input" in said
    assert "\n" not in said
    assert_one_error(capsys, main(["data", "stats", str(mixed)]), "corpus ", "every part reads the whole corpus")
    assert len(PretrainingDataset(parts)) == read_meta(parts)["num_instances"] > 0    # a true set still reads


def test_a_masking_difference_names_the_field(parts, corpus, tmp_path):
    """It said `masking {"mask_prob": 0.8, "masked_lm_prob": 0.15, "max_ngram": 3, "max_predictions_p... vs` the
    same cut-off text twice: the differing field (`mode`) was cut off on both sides."""
    mixed = _with_part_1_from(parts, tmp_path, [corpus], "--masking", "token")
    with pytest.raises(UserError, match=r"\(masking\.mode token vs ngram\); build every part with the same settings"):
        read_meta(mixed)


def test_a_missing_part_says_which_and_how_to_complete_the_set(parts, tmp_path):
    incomplete = tmp_path / "incomplete"
    shutil.copytree(parts, incomplete, ignore=shutil.ignore_patterns("*part-00001-of-00002*"))
    with pytest.raises(UserError) as caught:
        read_meta(incomplete)
    said = str(caught.value)
    assert "holds parts [0] of 2; missing [1]" in said and "--num-shards 2 --shard-index 1" in said
    assert "meta.part-00001-of-00002.json" in said and "part-00001-of-00002-shard-*.bin" in said


def test_a_truncated_shard_says_its_size_and_a_missing_one_says_missing(parts, tmp_path):
    """A copy cut short (an interrupted rsync or scp) and a shard not copied were one message, 'missing or has the
    wrong size', without the size found."""
    copy = tmp_path / "copy"
    shutil.copytree(parts, copy)
    shard = copy / read_meta(copy)["shards"][-1]["file"]
    size = shard.stat().st_size
    shard.write_bytes(shard.read_bytes()[:-7])
    with pytest.raises(UserError, match=rf"{shard.name} has the wrong size: {size - 7} bytes, expected {size} "):
        PretrainingDataset(copy)
    shard.unlink()
    with pytest.raises(UserError, match=rf"{shard.name} is missing \(listed in the build's meta file\)"):
        PretrainingDataset(copy)


def test_a_damaged_record_in_a_part_names_the_shard_file(parts, tmp_path):
    """In a parts build the loader's 'instance I (in shard S)' counted shards over all parts: there is no
    shard-0000S.bin to look at, nor a word of which part to copy again."""
    copy = tmp_path / "copy"
    shutil.copytree(parts, copy)
    meta = read_meta(copy)
    last = meta["shards"][-1]
    assert last["file"].startswith("part-00001-of-00002-shard-") and len(meta["shards"]) >= 2
    records = np.memmap(copy / last["file"], mode="r+", shape=(last["num_instances"],),
                        dtype=record_dtype(meta["max_seq_length"], meta["max_predictions_per_seq"],
                                           meta["tokenizer"]["vocab_size"]))
    records["length"][0] = 0
    records.flush()
    del records
    first = meta["num_instances"] - last["num_instances"]
    shard = len(meta["shards"]) - 1
    with pytest.raises(UserError, match=rf"instance {first} \(in shard {shard}\) is damaged \(file {last['file']}\)"):
        PretrainingDataset(copy)[first]


def test_two_ranks_read_disjoint_shares_and_an_epoch_reads_every_instance_once(parts):
    """A guard of what the brief asked to check: on a parts build each of 2 ranks reads its own half of every
    global batch, and one epoch reads every instance once (the remainder below one global batch is dropped)."""
    from albertlm.training.loop import StepData, shuffled_batches

    data = PretrainingDataset(parts, dynamic_masking=True, seed=3)
    batch = 8
    steps = len(data) // batch
    read = []
    for rank in (0, 1):
        sampler = StepData(data, collate, shuffled_batches(len(data), batch, 3), micro_batches=2, rank=rank,
                           world_size=2, epoch_keys=True, identity={"batch_size": batch})
        plan = sampler.plan(0)
        read.append([[key for micro in next(plan) for key in micro] for _ in range(steps)])
    for step in range(steps):
        mine, theirs = ({index for _, index in keys} for keys in (read[0][step], read[1][step]))
        assert len(mine) == len(theirs) == batch // 2 and not mine & theirs
    everything = [index for rank in read for keys in rank for epoch, index in keys if epoch == 0]
    assert len(everything) == len(set(everything)) == steps * batch
    assert len(data) - len(everything) < batch
