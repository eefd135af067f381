"""The paper's fine-tuning hyperparameters as named recipes.

Sources: ALBERT paper (Lan et al. 2020) appendix A.4, Table 14 (LR, batch, ALBERT dropout, classifier
dropout, training steps, warmup steps, max sequence length), which agrees with google-research/albert
`run_glue.sh` (`run_task TASK warmup lr steps save batch`); RACE v2 from the google-research README
(`run_race.py ... --learning_rate=1e-5 --train_batch_size=32 --train_step=12000 --warmup_step=1000`):
v2 checkpoints have no dropout and diverge on RACE at the paper's 2e-5, so `race-v2` uses 1e-5 and "0 ALBERT DR"
(the README: the encoder's dropout, Table 14's "ALBERT DR" column). The classifier's dropout is `run_race.py`'s
`--dropout_prob`, 0.1 by default and left so by the README's command, so `race-v2` keeps it (it had 0).
`squad2.0` trains google's SQuAD v2.0 head (`run_squad_v2.py`: `squad_head="xlnet"`, `heads.AlbertForSquadV2`).
What fine-tuning does otherwise next to google-research's scripts (its optimizer above all) is docs/finetuning.md's
"Against google-research's fine-tuning scripts".
"""
from __future__ import annotations

from albertlm.config.task import FinetuneConfig, finetune_optim, finetune_train
from albertlm.errors import UserError

# name: (lr, batch, ALBERT dropout, classifier dropout, train steps, warmup steps, max seq length)
PAPER_TABLE: dict[str, tuple[float, int, float, float, int, int, int]] = {
    "cola": (1e-5, 16, 0.0, 0.1, 5336, 320, 512),
    "stsb": (2e-5, 16, 0.0, 0.1, 3598, 214, 512),
    "sst2": (1e-5, 32, 0.0, 0.1, 20935, 1256, 512),
    "mnli": (3e-5, 128, 0.0, 0.1, 10000, 1000, 512),
    "qnli": (1e-5, 32, 0.0, 0.1, 33112, 1986, 512),
    "qqp": (5e-5, 128, 0.1, 0.1, 14000, 1000, 512),
    "rte": (3e-5, 32, 0.1, 0.1, 800, 200, 512),
    "mrpc": (2e-5, 32, 0.0, 0.1, 800, 200, 512),
    "wnli": (2e-5, 16, 0.1, 0.1, 2000, 250, 512),
    "squad1.1": (5e-5, 48, 0.0, 0.1, 3649, 365, 384),
    "squad2.0": (3e-5, 48, 0.0, 0.1, 8144, 814, 512),
    "race": (2e-5, 32, 0.1, 0.1, 12000, 1000, 512),
    "race-v2": (1e-5, 32, 0.0, 0.1, 12000, 1000, 512),
}

# defaults when no recipe is named: the common BERT-style setup, short sequences for GLUE
FAMILY_DEFAULTS = {
    "glue": FinetuneConfig(max_seq_length=128),
    "classify": FinetuneConfig(max_seq_length=128),
    "squad": FinetuneConfig(finetune_optim(lr=3e-5), finetune_train(epochs=2.0), max_seq_length=384),
    "race": FinetuneConfig(finetune_optim(lr=1e-5), finetune_train(epochs=2.0), max_seq_length=512),
}


def recipe(name: str) -> FinetuneConfig:
    """A paper recipe by name (`sst2`, `squad2.0`, `race-v2`, ...)."""
    key = name.lower().replace("-", "") if name.lower() not in PAPER_TABLE else name.lower()
    key = {"sst-2": "sst2", "sts-b": "stsb", "squad1": "squad1.1", "squad2": "squad2.0",
           "racev2": "race-v2"}.get(key, key)
    if key not in PAPER_TABLE:
        raise UserError(f"unknown recipe {name!r}; choose from {', '.join(PAPER_TABLE)}")
    lr, batch, dropout, cls_dropout, steps, warmup, max_len = PAPER_TABLE[key]
    # google's fine-tuning optimizer (AdamWeightDecayOptimizer: no bias correction), as the table's runs had it;
    # SQuAD v2.0 with run_squad_v2.py's head (start/end beam and answer_class), which the table's runs trained
    return FinetuneConfig(finetune_optim(name="adamweightdecay", lr=lr, warmup_steps=warmup),
                          finetune_train(batch_size=batch, max_steps=steps),
                          max_seq_length=max_len, hidden_dropout=dropout, attention_dropout=dropout,
                          classifier_dropout=cls_dropout, squad_head="xlnet" if key == "squad2.0" else "bert")


def warmup_as_share(cfg: FinetuneConfig) -> FinetuneConfig:
    """A recipe whose run is as long as `--epochs` makes it (not its own step count): its warmup as the same share
    of the run as in the table (RTE: 200 of 800 steps, 0.25; RACE: 1000 of 12000) instead of the same number of
    steps, which on a smaller data set was most of the run (`--recipe rte --epochs 3` on RTE's 2,490 pairs: 234
    steps, 200 of them warmup, the rate at its peak for one step) or more than all of it. A config without a
    step count or without a warmup in steps is returned as it is."""
    optim, train = cfg.optim, cfg.train
    if optim.warmup_steps < 0 or train.max_steps <= 0:
        return cfg
    return cfg.replace(optim=optim.replace(warmup_steps=-1, warmup_ratio=optim.warmup_steps / train.max_steps))
