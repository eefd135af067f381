"""The lead's follow-ups of the thirty-second session's audits."""
from __future__ import annotations

from pathlib import Path

import pytest

from albertlm.cli import model_commands


@pytest.mark.parametrize("model_class, said_pooler", [("AlbertForMaskedLM", True), ("AlbertForPreTraining", False),
                                                      ("AlbertForSequenceClassification", False)])
def test_tf_info_says_pooler_variables_unused_only_for_a_class_without_a_pooler(monkeypatch, tmp_path, model_class,
                                                                               said_pooler):
    """`info` on a TF checkpoint: an unused bert/pooler/* variable is "the pooler's ... : X has no pooler" only where X
    has none; under a class that reads its pooler it is another variable the class does not read."""
    import albertlm.interop.tf as tf

    def describe(path, config):
        return dict(prefix=Path(path), model_class=model_class, config=None, stored_parameters=10, files={},
                    unused={"bert/pooler/dense/kernel": 6, "cls/other": 4}, missing=[])

    monkeypatch.setattr(tf, "describe_tf_checkpoint", describe)
    info = model_commands._tf_info(tmp_path)
    assert (model_class in model_commands.WITHOUT_POOLER) is said_pooler
    assert info["unused"] == ({"pooler": 6, "other": 4} if said_pooler else {"other": 10})


@pytest.mark.parametrize("given, meant", [("CPU", "cpu"), ("cpuu", "cpu"), ("smok", "smoke")])
def test_a_mistyped_scale_name_is_offered_the_nearest_named_scale(given, meant):
    """`ablate --scale` took a Literal of the named scales (argparse's choices: `did you mean cpu?`) until it took scale
    files too (this session); a mistyped name is still offered the nearest named scale."""
    from albertlm.errors import UserError
    from albertlm.experiments.scales import get_scale

    with pytest.raises(UserError) as exc:
        get_scale(given)
    assert f"unknown scale {given!r} (did you mean {meant}?);" in str(exc.value), str(exc.value)
