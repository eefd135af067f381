"""Audit 22: what a pretraining run trains on, across `--resume` and rebuilds of a build in parts. The same
instances rebuilt with another --num-shards come in another order (part i holds chunks i, i+K, ...), and a
resume on them was accepted: example index i was another instance, so the resumed epoch read some instances
twice and others never. A part of another --num-shards could not replace an old set even with --overwrite, and
a directory holding a single build's meta.json beside part metas was read as the single build, the parts
ignored without a word. Each test below failed before its fix."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from albertlm.cli.main import main
from albertlm.data.loader import PretrainingDataset
from albertlm.data.shards import read_meta
from albertlm.errors import UserError
from conftest import assert_one_error, shared_path
from test_cluster_audit22 import _part, corpus, parts  # noqa: F401  (the cluster audit's parts and their corpus)
from train_fixtures import TINY_PRETRAIN_ARGS

TINY = [*TINY_PRETRAIN_ARGS, "--warmup-steps", "1", "--lr", "0.01", "--train.tensorboard=false", "--no-progress",
        "--save-every", "2", "--log-every", "1"]


@pytest.fixture(scope="module")
def single(corpus, tmp_path_factory) -> Path:  # noqa: F811
    """The single-machine build of the parts' corpus, with their settings: the same instances, in chunk order."""
    out = tmp_path_factory.mktemp("single") / "data"
    assert main(["data", "build", "--input", str(corpus), "--out", str(out), "--max-seq-length", "32",
                 "--dupe-factor", "1", "--chunk-chars", "2000", "--no-progress",
                 "--tokenizer", str(shared_path("spm", "albert-base-v2_spiece.model"))]) == 0
    return out


def _pretrain(data: Path, run: Path, steps: int, *extra: str) -> int:
    return main(["pretrain", "--data", str(data), "--out", str(run), "--max-steps", str(steps), *TINY, *extra])


def test_resume_on_the_data_rebuilt_with_another_num_shards_is_refused(parts, corpus, single,  # noqa: F811
                                                                      tmp_path, capsys):
    """A run on a 2-part build, the data rebuilt in place as one build (the same instances, another order):
    `--resume` went on, reading example i as another instance than the run's first steps did."""
    assert read_meta(parts)["num_instances"] == read_meta(single)["num_instances"]
    data, run = tmp_path / "data", tmp_path / "run"
    shutil.copytree(parts, data)
    assert _pretrain(data, run, 2) == 0
    shutil.rmtree(data)
    shutil.copytree(single, data)
    capsys.readouterr()
    assert_one_error(capsys, _pretrain(data, run, 3, "--resume"), "cannot resume exactly",
                     "data_num_shards is 2, now 1", "the training data changed since the run started")
    # the same parts cut into other shard files hold the same sequence: the resume goes on
    shutil.rmtree(data)
    for index in (0, 1):
        _part([corpus], data, index, "--records-per-shard", "7")
    assert len(read_meta(data)["shards"]) > len(read_meta(parts)["shards"])
    assert _pretrain(data, run, 3, "--resume") == 0


def test_overwrite_replaces_the_parts_of_another_num_shards(parts, corpus, tmp_path, capsys):  # noqa: F811
    """Rebuilding a 2-part set as 3 parts in the same --out was refused with 'use another --out', and
    --overwrite did not help; now --overwrite removes the old set's files (by their exact names) and
    without it the refusal says which files are in the way."""
    out = tmp_path / "data"
    shutil.copytree(parts, out)
    (out / "notes.txt").write_text("mine")
    before = sorted(p.name for p in out.iterdir())
    capsys.readouterr()
    assert_one_error(capsys, _part_code([corpus], out, 0), "holds parts of a 2-part build", "num_shards 3 vs 2",
                     "pass --overwrite", "meta.part-*-of-00002.json")
    assert sorted(p.name for p in out.iterdir()) == before
    _part([corpus], out, 0, "--num-shards", "3", "--overwrite")
    assert not list(out.glob("*-of-00002*")) and (out / "notes.txt").read_text() == "mine"
    for index in (1, 2):
        _part([corpus], out, index, "--num-shards", "3")
    assert read_meta(out)["num_shards"] == 3
    assert len(PretrainingDataset(out)) == read_meta(parts)["num_instances"]


def _part_code(inputs: list[Path], out: Path, index: int) -> int:
    """The exit code of `_part` of a 3-part build (its later --num-shards wins), which asserts success."""
    codes = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("test_cluster_audit22.main", lambda argv: codes.append(main(argv)) or 0)
        _part(inputs, out, index, "--num-shards", "3")
    return codes[0]


def test_a_single_build_and_parts_in_one_directory_are_refused(parts, single, tmp_path, capsys):  # noqa: F811
    """meta.json copied beside part metas (two builds copied together by hand): the directory read as the single
    build, the parts ignored without a word."""
    mixed = tmp_path / "mixed"
    shutil.copytree(parts, mixed)
    for path in single.iterdir():
        if path.name != "word_starts.npy":
            shutil.copy(path, mixed / path.name)
    with pytest.raises(UserError) as caught:
        PretrainingDataset(mixed)
    said = str(caught.value)
    assert "holds two builds" in said and "meta.part-00000-of-00002.json" in said and "\n" not in said
    capsys.readouterr()
    assert_one_error(capsys, main(["data", "stats", str(mixed)]), "holds two builds", "keep one")


def test_the_summary_of_a_part_without_chunks_has_no_zero_of_zero_line(corpus, tmp_path, capsys):  # noqa: F811
    """A part owning none of the corpus's chunks (more parts than chunks) is an empty build, and its summary said
    `unknown tokens (<unk>) 0 of 0 tokens of text (0.00%)`: nothing was tokenized, so there is nothing to say."""
    capsys.readouterr()
    _part([corpus], tmp_path / "empty", 39, "--num-shards", "40")
    err = capsys.readouterr().err
    assert "wrote 0 instances" in err and "unknown tokens" not in err, err
