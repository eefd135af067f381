"""`albertlm info` on a transformers directory whose config.json names no `architectures` (a custom training
loop's save) names the class its head weights make, as `convert` reads it (it said AlbertForPreTraining)."""
from __future__ import annotations

import json

import pytest

from albertlm.cli.main import main

transformers = pytest.importorskip("transformers")


def test_info_names_the_class_of_the_heads_when_architectures_is_missing(tmp_path, capsys):
    config = transformers.AlbertConfig(vocab_size=40, embedding_size=8, hidden_size=16, num_hidden_layers=1,
                                       num_attention_heads=2, intermediate_size=24, max_position_embeddings=16,
                                       num_labels=3)
    transformers.AlbertForSequenceClassification(config).save_pretrained(tmp_path / "m")
    path = tmp_path / "m" / "config.json"
    data = json.loads(path.read_text())
    data.pop("architectures", None)
    path.write_text(json.dumps(data))
    assert main(["info", str(tmp_path / "m")]) == 0
    out = capsys.readouterr().out
    assert "AlbertForSequenceClassification" in out and "AlbertForPreTraining" not in out, out
