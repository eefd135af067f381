"""Interop findings of the sixteenth session's audit: a refused export leaves an --overwrite DST's earlier model as
it was, sharing modes with one group per layer (nothing shared) export to transformers and import from google's TF
layout, `--from hf` on a directory without config.json is one plain line, and an explicit --tokenizer that is no
tokenizer is refused before anything is written."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from albertlm.cli.main import main
from albertlm.config import ModelConfig
from conftest import assert_one_error, shared_path

FIXTURE = Path(__file__).parent / "fixtures" / "tf_albert_tiny"


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main([*map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def tiny(**changes) -> ModelConfig:
    return ModelConfig(**{**dict(vocab_size=50, embedding_size=8, hidden_size=16, num_layers=4, num_heads=2,
                                 ffn_size=24, max_position_embeddings=160, hidden_dropout=0.0, attention_dropout=0.0,
                                 classifier_dropout=0.0, initializer_range=0.3), **changes})


def test_a_refused_export_leaves_the_overwritten_destination_as_it_was(capsys, tmp_path):
    """With --overwrite, DST's files were deleted before the export found that sharing 'attention' has no
    transformers form: the error came, and the earlier model was gone."""
    from albertlm.model.albert import AlbertModel

    torch.manual_seed(0)
    AlbertModel(tiny()).save_pretrained(tmp_path / "good")
    AlbertModel(tiny(sharing="attention", num_groups=2)).save_pretrained(tmp_path / "shared_attention")
    assert run(capsys, "convert", tmp_path / "good", tmp_path / "hf", "--to", "hf")[0] == 0
    before = {p.name: p.read_bytes() for p in (tmp_path / "hf").iterdir()}
    code = main(["convert", str(tmp_path / "shared_attention"), str(tmp_path / "hf"), "--to", "hf", "--overwrite"])
    assert_one_error(capsys, code, "sharing='attention'", "transformers")
    assert {p.name: p.read_bytes() for p in (tmp_path / "hf").iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["good", "hf", "shared_attention"]   # no staging left


@pytest.mark.parametrize("sharing,inner", [("attention", 1), ("ffn", 2)])
def test_one_group_per_layer_exports_to_transformers_with_equal_hidden_states(capsys, tmp_path, sharing, inner):
    """sharing 'attention' / 'ffn' with N = L shares nothing (every block has its own attention and FFN): the
    layout of transformers' num_hidden_groups = L. It was refused as inexpressible."""
    transformers = pytest.importorskip("transformers")
    from albertlm.model.albert import AlbertModel
    from albertlm.tokenization import load_tokenizer

    spm = shared_path("spm", "albert-base-v2_spiece.model")
    lines = [l for l in shared_path("text", "gutenberg", "carroll-alice.txt").read_text().splitlines() if l.strip()]
    tokenizer = load_tokenizer(spm)
    torch.manual_seed(0)
    cfg = tiny(vocab_size=tokenizer.vocab_size, sharing=sharing, num_groups=4, inner_group_num=inner)
    ours = AlbertModel(cfg).eval()
    ours.save_pretrained(tmp_path / "ours")
    code, out, err = run(capsys, "convert", tmp_path / "ours", tmp_path / "hf", "--to", "hf", "--tokenizer", spm)
    assert code == 0, err
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["num_hidden_groups"] == 4
    theirs = transformers.AlbertModel.from_pretrained(tmp_path / "hf").eval()
    pairs = [tokenizer.encode_pair(a, b) for a, b in zip(lines[10:40:2], lines[11:41:2])]
    length = max(len(ids) for ids, _ in pairs)
    ids = torch.tensor([p[0] + [0] * (length - len(p[0])) for p in pairs])
    types = torch.tensor([p[1] + [0] * (length - len(p[1])) for p in pairs])
    mask = torch.tensor([[1] * len(p[0]) + [0] * (length - len(p[0])) for p in pairs])
    with torch.no_grad():
        a = ours(ids, mask, types)
        b = theirs(input_ids=ids, attention_mask=mask, token_type_ids=types)
    real = mask.bool()
    torch.testing.assert_close(a.last_hidden_state[real], b.last_hidden_state[real], atol=1e-5, rtol=0)
    torch.testing.assert_close(a.pooler_output, b.pooler_output, atol=1e-5, rtol=0)
    # and back: every weight bit for bit
    assert run(capsys, "convert", tmp_path / "hf", tmp_path / "back")[0] == 0
    from albertlm.model.registry import load_saved_model

    back = load_saved_model(tmp_path / "back").state_dict()
    for key, value in ours.state_dict().items():
        assert torch.equal(back[key], value), key


def test_a_google_checkpoint_with_one_group_per_layer_imports(capsys, tmp_path):
    """google's modeling.py runs layer l on group int(l / L * N), our l * N // L but for a few configs that
    `tf.check_google_layer_groups` refuses (L = N = 22, ...; not this one); N = L (nothing shared) reads
    as our sharing 'none', which the TF key map refused ("sharing='none' has no TF layout"). The fixture (L 4, N 2)
    re-packed with each group's variables under two consecutive group names is the same network with N = 4."""
    from albertlm.interop import tf_checkpoint as tfc
    from albertlm.interop.tf import import_tf_checkpoint
    from test_tf_import import build_table, copy_checkpoint

    prefix = copy_checkpoint(FIXTURE, tmp_path / "ckpt")
    table = tfc.read_table(Path(f"{prefix}.index").read_bytes(), "fixture")
    items = []
    for key, value in table.items():
        if key.startswith(b"bert/encoder/transformer/group_"):
            group = int(key.split(b"/")[3].removeprefix(b"group_"))
            rest = key.split(b"/", 4)[4]
            items += [(b"bert/encoder/transformer/group_%d/%s" % (2 * group + i, rest), value) for i in (0, 1)]
        else:
            items.append((key, value))
    Path(f"{prefix}.index").write_bytes(build_table(sorted(items), per_block=16, snappy=False))
    config = json.loads((FIXTURE / "albert_config.json").read_text())
    (tmp_path / "ckpt" / "albert_config.json").write_text(json.dumps({**config, "num_hidden_groups": 4}))

    model, report = import_tf_checkpoint(prefix)
    assert model.config.sharing == "none" and not report.missing and not report.unused
    ref = np.load(FIXTURE / "forward.npz")   # google's own forward on the N = 2 original
    model.eval()
    with torch.no_grad():
        out = model.albert(*(torch.from_numpy(ref[k]).long() for k in ("input_ids", "input_mask", "token_type_ids")))
    torch.testing.assert_close(out.last_hidden_state, torch.from_numpy(ref["sequence_output"]), atol=1e-5, rtol=0)
    code, _, err = run(capsys, "convert", tmp_path / "ckpt", tmp_path / "hf", "--to", "hf")
    assert code == 0, err
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["num_hidden_groups"] == 4


def test_from_hf_on_a_directory_without_config_json_is_one_plain_line(capsys, tmp_path):
    """It printed Python's "[Errno 2] No such file or directory: '.../config.json'"."""
    for f in FIXTURE.glob("model.ckpt-0.*"):
        shutil.copyfile(f, tmp_path / f.name)
    code = main(["convert", str(tmp_path), str(tmp_path / "out"), "--from", "hf"])
    assert_one_error(capsys, code, "no config.json", "--from")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("to,name", [("hf", "spiece.model"), ("albertlm", "30k-clean.model"), ("albertlm", "checkpoint")])
def test_an_explicit_tokenizer_that_is_no_tokenizer_is_refused(capsys, tmp_path, to, name):
    """A --tokenizer naming some other file (here: the TF checkpoint's state file) was copied into DST as
    spiece.model and the conversion succeeded; every later load of DST's tokenizer failed on it."""
    bad = tmp_path / name
    shutil.copyfile(FIXTURE / "checkpoint", bad)
    code = main(["convert", str(FIXTURE), str(tmp_path / "out"), "--to", to, "--tokenizer", str(bad)])
    assert_one_error(capsys, code, "--tokenizer", str(bad))
    assert not (tmp_path / "out").exists()


def test_an_explicit_tokenizer_json_is_copied_as_tokenizer_json(capsys, tmp_path):
    """`--tokenizer tok.json` (transformers' tokenizer.json, which every command loads) landed in DST as
    spiece.model, where nothing could read it."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    from albertlm.tokenization import load_tokenizer

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat"]
    source = Tokenizer(models.WordPiece({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    source.pre_tokenizer = pre_tokenizers.Whitespace()
    source.save(str(tmp_path / "tok.json"))
    code, out, err = run(capsys, "convert", FIXTURE, tmp_path / "out", "--tokenizer", tmp_path / "tok.json")
    assert code == 0, err
    assert not (tmp_path / "out" / "spiece.model").exists()
    assert (tmp_path / "out" / "tokenizer.json").read_bytes() == (tmp_path / "tok.json").read_bytes()
    assert load_tokenizer(tmp_path / "out").encode("the cat sat") == load_tokenizer(tmp_path / "tok.json").encode("the cat sat")
