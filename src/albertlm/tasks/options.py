"""Each task family's data options: dataclasses whose fields (with their comments) become the command-line
options of `albertlm finetune|predict|evaluate <family>`. No torch here, so `--help` stays fast."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from albertlm.errors import UserError
from albertlm.tasks.classify import Columns
from albertlm.tasks.race import LEVELS


@dataclass
class GlueOptions:
    # cola, sst2, mrpc, stsb, qqp, mnli, qnli, rte, wnli or ax (MNLI's diagnostic set); default: the one the model's
    # run recorded (predict, evaluate --model, finetune --resume), needed otherwise (a new run, evaluate --predictions)
    task: str
    data_dir: str = ""                   # the task's GLUE folder (train.tsv, dev.tsv or val.tsv, test.tsv)
    train: str = ""                      # training file (instead of DATA_DIR/train.tsv)
    dev: list[str] = field(default_factory=list)   # dev file(s) (instead of DATA_DIR/dev*.tsv or val.tsv)
    # unlabelled test file(s) for GLUE submission files (an MNLI run may add diagnostic.tsv / AX.tsv)
    test: list[str] = field(default_factory=list)
    skip_bad_rows: bool = False          # skip malformed training/dev rows (too few fields, or more than the header; counted and reported) instead of stopping; test rows are never skipped


@dataclass
class SquadOptions:
    version: Literal["", "1.1", "2.0"] = ""  # SQuAD 1.1 (every question answerable) or 2.0 (some are not); default: the version the data shows
    train: str = ""                      # SQuAD train JSON
    dev: str = ""                        # SQuAD dev JSON (official or flat layout)
    doc_stride: int = 128                # tokens between the starts of a long context's windows
    max_query_length: int = 64           # question tokens kept
    n_best_size: int = 20                # start / end candidates considered per window
    max_answer_length: int = 30          # longest answer, in tokens
    # SQuAD v2.0's no-answer threshold for predictions.json (a question is unanswered where its null_odds.json odds
    # exceed it): a number, or with predict / evaluate 'recorded' (the one the model's run tuned on dev, in
    # best/task.json; finetune takes a number, for an unlabelled --dev only); default: tuned on a labelled file,
    # else the recorded one, else 0
    null_threshold: str = ""


@dataclass
class RaceOptions:
    data_dir: str = ""                   # the RACE directory (train/ dev/ test/ with middle/ high/)
    levels: str = "middle,high"          # middle, high or both (comma-separated)
    max_qa_length: int = 128             # question + option tokens kept
    split: str = ""                      # the split to predict or evaluate; "" = dev (and test when fine-tuning)

    def level_list(self) -> tuple[str, ...]:
        levels = tuple(dict.fromkeys(level.strip() for level in self.levels.split(",") if level.strip()))
        bad = [level for level in levels if level not in LEVELS]
        if bad:
            raise UserError(f"--levels: unknown level(s) {bad}; use middle, high")
        return levels


@dataclass
class ClassifyOptions:
    train: str = ""                      # training CSV / TSV / JSONL / Parquet / Arrow (by the suffix)
    dev: str = ""                        # labelled dev file
    test: str = ""                       # unlabelled file to predict
    text_column: str = "text"            # the column (or JSON field) holding the text
    text_pair_column: str = ""           # a second text column for sentence pairs; "" = single texts
    label_column: str = "label"          # the column holding the label
    id_column: str = ""                  # a column of example ids for the prediction files; "" = row numbers
    regression: bool = False             # a real-valued label (MSE loss, Pearson / Spearman)
    labels: str = ""                     # comma-separated label set; "" = the sorted training labels

    def columns(self) -> Columns:
        return Columns(self.text_column, self.text_pair_column or None, self.label_column,
                                self.id_column or None)

    def label_list(self) -> list[str] | None:
        return [label.strip() for label in self.labels.split(",")] if self.labels else None


@dataclass
class SquadScoreOptions:
    """`albertlm evaluate squad --predictions`: SQuAD v2.0's no-answer odds."""
    na_probs: str = ""                   # null_odds.json for SQuAD v2.0 (enables the best-threshold scores)
    na_prob_thresh: float = 1.0          # no-answer odds above which a question counts as unanswered
    # score a question without a prediction as wrong (0 EM/F1, over all gold questions); by default v2.0
    # leaves it out, as the official script does (a warning on stderr names how many and the first few)
    strict: bool = False


# the dev metrics `finetune classify --best-metric` may keep the best model by (each is higher-better; metrics.py
# computes them); the first of each is the default
BEST_METRICS = {"classes": ("accuracy", "macro_f1", "mcc", "f1"), "regression": ("pearson", "spearman")}


def check_best_metric(name: str | None, regression: bool, num_labels: int) -> str:
    """The metric the best dev model is kept by: `name`, else accuracy (regression: Pearson). One the task does
    not compute is refused, saying which it does (F1 is the second class's, of two classes only)."""
    kind = "regression" if regression else "classes"
    allowed = BEST_METRICS[kind] if regression or num_labels == 2 else BEST_METRICS[kind][:-1]
    if not name:
        return allowed[0]
    if name not in allowed:
        if regression:
            what = "a regression (--regression) is scored by"
        elif name == "f1":
            what = f"f1 is the second class's, of two classes; {num_labels} classes are scored by"
        else:
            what = "classes are scored by"
        raise UserError(f"--best-metric {name}: {what} {', '.join(allowed)}; choose one of them")
    return name


OPTIONS = {"glue": GlueOptions, "squad": SquadOptions, "race": RaceOptions, "classify": ClassifyOptions}
ALIASES = {"squad": {"--data": "dev"}, "race": {"--data": "data_dir"}, "classify": {"--data": "dev"}}
SCORE_OPTIONS = {"squad": SquadScoreOptions}   # extra options of `evaluate <family> --predictions`
