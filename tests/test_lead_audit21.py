"""The lead's follow-ups of session 21's audits: the fine-tuning command's stdout and help."""
from __future__ import annotations

import json

from albertlm.cli.main import main


def test_finetune_help_says_what_save_every_0_means_for_fine_tuning(capsys):
    """`--save-every 0` saves at every dev evaluation in fine-tuning; the help showed pretraining's meaning
    ("only at the end")."""
    try:
        main(["finetune", "classify", "--help"])
    except SystemExit:
        pass
    text = " ".join(capsys.readouterr().out.split())
    assert "0 = at every dev evaluation" in text and "0 = only at the end" not in text


def test_finetune_prints_null_not_nan_for_a_nan_best_score(tmp_path, capsys, monkeypatch):
    """The summary `finetune` prints on stdout held a bare NaN (not JSON) when the best score was NaN."""
    from conftest import TINY_WORDS, save_tiny_pretrained

    import albertlm.tasks.finetune as finetune

    (tmp_path / "model").mkdir()
    model = save_tiny_pretrained(tmp_path / "model")
    (tmp_path / "data.csv").write_text("text,label\n" + "".join(f"{w},{'pos' if i % 2 else 'neg'}\n"
                                                             for i, w in enumerate(TINY_WORDS)))
    monkeypatch.setattr(finetune, "run_finetune",
                        lambda *a, **k: {"best": {"step": 2, "dev": {"accuracy": float("nan")}}, "status": "done"})
    assert main(["finetune", "classify", "--train", str(tmp_path / "data.csv"), "--model", str(model),
                 "--out", str(tmp_path / "run"), "--max-steps", "2", "--batch-size", "4", "--no-progress"]) == 0
    out = capsys.readouterr().out
    printed = json.loads(out[out.index("{"):], parse_constant=lambda name: (_ for _ in ()).throw(ValueError(name)))
    assert printed["best"]["dev"]["accuracy"] is None
