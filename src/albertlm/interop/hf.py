"""Hugging Face transformers <-> albertlm, through the declarative map in `albertlm.model.hf_format`.

Import needs nothing here: every model class's `from_pretrained(dir)` reads a transformers ALBERT
directory. Export writes `config.json` + `model.safetensors` that transformers' Albert* classes load
with no missing or unexpected keys. transformers shares attention and FFN together (its groups of inner
layers), so models with sharing `attention` or `ffn` cannot be exported (a UserError says so), unless every
layer is its own group (N = L, or L = 1): then nothing is shared and the model is exported as `none`.
"""
from __future__ import annotations

import json
import re
import unicodedata
from pathlib import Path

from torch import nn

from albertlm.errors import UserError, json_object_or_empty
from albertlm.model import hf_format
from albertlm.model.albert import AlbertModel, sharing_plan
from albertlm.model.io import LABELLED, fine_tuning_record, model_labels, user_path
from albertlm.model.registry import architecture_from_weights  # noqa: F401 (its home was here)

# our class name -> transformers class name (they match; listed so an unknown class fails clearly)
HF_ARCHITECTURES = ("AlbertModel", "AlbertForPreTraining", "AlbertForMaskedLM", "AlbertForSequenceClassification",
                    "AlbertForTokenClassification", "AlbertForQuestionAnswering", "AlbertForMultipleChoice")


# google's SQuAD v2.0 head (heads.AlbertForSquadV2) exists in albertlm alone: what to do instead of exporting it
SQUAD_V2_REFUSAL = ("cannot export AlbertForSquadV2 (google's SQuAD v2.0 head: start/end beam and answer_class) "
                    "{target}: {what}; predict with albertlm (`albertlm predict squad --model DIR`), or export the "
                    "encoder alone ({encoder}; the head stays behind)")


def export_hf(model: nn.Module, directory: str | Path, labels: dict | None = None) -> Path:
    """Write `model` (any albertlm Albert* class) as a transformers directory. `labels`: a classifier's
    {"id2label": {"0": name, ...}, "problem_type": ...} for config.json; by default the model's own `labels` (those
    `from_pretrained` read from its checkpoint: a transformers config's id2label and problem_type, our labels.json,
    a fine-tuning run's task.json), else transformers' names LABEL_i (a sequence classifier with one label, ours a
    regression, says problem_type "regression" unless `labels` says otherwise). Labels given here must fit the
    classifier (as many names as num_labels, a problem_type transformers knows), else a UserError before anything
    is written. `directory` (here and in every function below taking a path): a str or Path, a leading `~`
    expanded as `save_pretrained` does (`user_path`: "~/export" was a folder named `~` in the working directory)."""
    from albertlm.model.io import write_safetensors

    _, cfg, config = _config_of(model, labels)
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    if isinstance(model, AlbertModel):
        state = {"albert." + k: v for k, v in state.items()}
    hf_state = hf_format.state_to_hf(state, cfg, sharing_plan(cfg))  # raises for attention / ffn sharing
    if isinstance(model, AlbertModel):  # transformers' bare model has no prefix
        hf_state = {k.removeprefix("albert."): v for k, v in hf_state.items()}
    directory = user_path(directory)
    floats = {v.dtype for v in hf_state.values() if v.is_floating_point()}
    if len(floats) == 1:   # what transformers' save_pretrained records (its from_pretrained's dtype="auto" reads it)
        config["dtype"] = str(floats.pop()).removeprefix("torch.")
    try:   # a path that is a file, a read-only folder: one line, not FileExistsError's traceback
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        write_safetensors({k: v.contiguous() for k, v in hf_state.items()}, directory / "model.safetensors",
                          metadata={"format": "pt"})   # a full disk an OSError (safetensors' own error was not)
    except OSError as exc:
        raise UserError(f"cannot write {directory}: {exc.strerror or exc}") from None
    from albertlm.model.io import mode_like, remove_earlier_weights

    mode_like(directory / "model.safetensors", directory / "config.json")
    remove_earlier_weights(directory)   # an earlier pytorch_model.bin or shards: not a second model beside this one
    return directory


def hf_config(model: nn.Module, labels: dict | None = None) -> dict:
    """The config.json `export_hf` writes for `model` (labels as there), without converting or writing weights
    (the ONNX serving directory's config: the graph holds the weights)."""
    return _config_of(model, labels)[2]


def _config_of(model: nn.Module, labels: dict | None) -> tuple[str, object, dict]:
    """(class name, the config exported, transformers' config.json for it with the labels); refusals first."""
    name = type(model).__name__
    if name == "AlbertForSquadV2":
        raise UserError(SQUAD_V2_REFUSAL.format(target="to transformers", what="transformers has no ALBERT class for "
                                                "it", encoder="from Python: `AlbertModel.from_pretrained(DIR)`, then "
                                                "export that"))
    if name not in HF_ARCHITECTURES:
        raise UserError(f"cannot export {name} to transformers (one of {', '.join(HF_ARCHITECTURES)})")
    cfg = hf_export_config(model.config)
    if name in ("AlbertForPreTraining", "AlbertForQuestionAnswering"):
        # transformers sizes the SOP head and the QA head (start, end) by num_labels; ours are always 2 wide
        cfg = cfg.replace(num_labels=2)
    if labels:   # before anything is written (a hand-edited labels.json, say)
        labels = hf_format.check_labels(labels, "export_hf labels", cfg.num_labels if name in LABELLED else None)
    elif labels is None:
        labels = model_labels(model)
    config = hf_format.config_to_hf(cfg, name)
    if labels and labels.get("id2label") and len(labels["id2label"]) == cfg.num_labels:  # not another head's
        config["id2label"] = {str(k): v for k, v in labels["id2label"].items()}
        config["label2id"] = {v: int(k) for k, v in labels["id2label"].items()}
    if labels and labels.get("problem_type"):
        config["problem_type"] = labels["problem_type"]
    elif name == "AlbertForSequenceClassification" and cfg.num_labels == 1:
        # ours with one label is a regression (MSE); transformers' text-classification pipeline runs a sigmoid over a
        # one-label model unless problem_type says regression (a GLUE STS-B score of 4.2 came out as 0.985)
        config["problem_type"] = "regression"
    return name, cfg, config


def hf_export_config(cfg):
    """The config to export `cfg`'s model as: itself for sharing `all` / `none`; `none` for sharing `attention` or
    `ffn` when every layer is its own group (N = L, or L = 1: nothing is shared, the same weights and plan);
    otherwise a UserError before anything is written (transformers shares attention and FFN together)."""
    if cfg.sharing in ("all", "none"):
        return cfg
    if all(a == f for a, f in sharing_plan(cfg)):
        return cfg.replace(sharing="none", num_groups=1)
    other = "FFN" if cfg.sharing == "attention" else "attention"
    raise UserError(f"sharing={cfg.sharing!r} ({cfg.num_layers} layers in {cfg.num_groups} group(s), each layer with "
                    f"its own {other}) cannot be expressed by transformers' ALBERT, which shares attention and FFN "
                    "together: only sharing 'all' or 'none' (or one group per layer) can be exported to transformers")


def import_hf(directory: str | Path, model_class: type | None = None) -> nn.Module:
    """Load a transformers ALBERT directory as the albertlm class named by its `architectures`
    (or `model_class`); a config without `architectures` (`config.save_pretrained` beside a `torch.save`d
    state dict) gets the class its head weights belong to (`architecture_from_weights`). The class the directory
    holds must fit its weights (`strict_heads`: an id2label of another length than the classifier's rows is refused,
    not loaded with a random classifier); a `model_class` of the caller's choice loads as `from_pretrained` does."""
    directory = user_path(directory)   # "~/hf" was read as the folder `~` here ("no config.json")
    if model_class is None:
        from albertlm.model.io import read_config
        from albertlm.model.registry import hf_class_name, model_class as class_named

        if json_object_or_empty(directory / "config.json").get("model_type", "albert") != "albert":
            read_config(directory)   # another model_type (BERT) is named as such, not by its class or weights
        return class_named(hf_class_name(directory)).from_pretrained(directory, strict_heads=True)
    return model_class.from_pretrained(directory)


# a classifier's labels: read where the model class is (the model layer), named here as before
from albertlm.model.io import LABELS_FILE, read_labels  # noqa: E402,F401


# -- tokenizer files and the model card: an exported directory that works as a whole ------------------------
def export_tokenizer(tokenizer, directory: str | Path) -> tuple[list[str], str | None]:
    """Write the tokenizer beside an exported model: `spiece.model` or `vocab.txt` plus
    `tokenizer_config.json` (what `tokenizer.save` writes), and `tokenizer.json` when the tokenizer can be
    expressed as one. Returns (files written, why tokenizer.json was left out or None)."""
    directory = user_path(directory)
    tokenizer.save(directory)
    config = directory / "tokenizer_config.json"   # transformers 5 leaves token_type_ids out unless asked
    if config.is_file():
        data = json.loads(config.read_text(encoding="utf-8"))
        data["model_input_names"] = ["input_ids", "token_type_ids", "attention_mask"]
        config.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    written = sorted(p.name for p in directory.iterdir() if p.name in ("spiece.model", "vocab.txt",
                                                                       "tokenizer_config.json"))
    pipeline, why_not = tokenizer_pipeline(tokenizer)
    if pipeline is not None:
        pipeline.save(str(directory / "tokenizer.json"))
        written.append("tokenizer.json")
    return written, why_not


def transformers5_rebuild_differences(tokenizer, pipeline) -> tuple[int, str | None]:
    """(how many vocabulary pieces, one of them) that transformers 5's `AlbertTokenizer` encodes otherwise than
    `pipeline` (our tokenizer.json). transformers 5 keeps a tokenizer.json's vocabulary and charsmap but rebuilds
    its normalizer from `do_lower_case` / `keep_accents` without our NFC step, so where accent stripping (NFKD)
    decomposes a piece, e.g. every Hangul syllable of a `--strip-accents` Korean model, it stays decomposed and
    becomes <unk> there. (0, None) for tokenizers transformers loads as written (WordPiece, no NFC step)."""
    from tokenizers import Tokenizer

    if type(tokenizer).__name__ != "SentencePieceTokenizer" or pipeline is None:
        return 0, None
    data = json.loads(pipeline.to_str())
    steps = data["normalizer"]["normalizers"]
    if not any(step["type"] == "NFC" for step in steps):
        return 0, None
    # transformers 5 has our "``" / "''" replacements, not the NFC step nor the half-width kana ones
    data["normalizer"]["normalizers"] = [step for step in steps if step["type"] != "NFC" and not (
        step["type"] == "Replace" and step["pattern"].get("String") not in ("``", "''"))]
    rebuilt = Tokenizer.from_str(json.dumps(data))
    sp = tokenizer.sp
    texts = [sp.id_to_piece(i).replace("\u2581", " ").strip() for i in range(tokenizer.vocab_size)
             if not (sp.is_control(i) or sp.is_unknown(i) or sp.is_unused(i))]
    texts = [t for t in texts if t]
    # a piece holding デ or パ, written in half-width katakana (ﾃﾞ, ﾊﾟ): two characters there, one in the model
    kana = {char: pair for pair, char in _halfwidth_kana_pairs(sp)}
    texts += sorted({kana[c] for t in texts for c in t if c in kana})
    ours = pipeline.encode_batch(texts, add_special_tokens=False)
    theirs = rebuilt.encode_batch(texts, add_special_tokens=False)
    differ = [t for t, a, b in zip(texts, ours, theirs) if a.ids != b.ids]
    return len(differ), (differ[0] if differ else None)


def tokenizer_pipeline(tokenizer):
    """(a `tokenizers.Tokenizer` giving the same ids as `tokenizer`, with transformers' [CLS]/[SEP]
    template, or None; why not). SentencePiece unigram models get transformers' AlbertTokenizer pipeline
    (normalizers, the model's own precompiled normalizer, whitespace split + "▁" on every word); WordPiece
    and tokenizer.json tokenizers reuse their `tokenizers` backend."""
    from tokenizers import processors

    kind = type(tokenizer).__name__
    if kind == "SentencePieceTokenizer":
        pipeline, why_not = _sentencepiece_pipeline(tokenizer)
        if pipeline is None:
            return None, why_not
    elif hasattr(tokenizer, "backend"):
        from tokenizers import Tokenizer

        pipeline = Tokenizer.from_str(tokenizer.backend.to_str())
    else:
        return None, f"{kind} has no tokenizer.json form"
    cls, sep = tokenizer.id_to_token(tokenizer.cls_id), tokenizer.id_to_token(tokenizer.sep_id)
    pipeline.post_processor = processors.TemplateProcessing(
        single=f"{cls}:0 $A:0 {sep}:0", pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1",
        special_tokens=[(cls, tokenizer.cls_id), (sep, tokenizer.sep_id)])
    return pipeline, None


def _halfwidth_kana_pairs(sp) -> list[tuple[str, str]]:
    """(half-width katakana + half-width sound mark, the one character the model's normalizer makes of it):
    "ﾃﾞ" -> "デ", "ﾊﾟ" -> "パ", for a model whose normalizer composes them (nmt_nfkc, nfkc; not identity)."""
    pairs = []
    for base in range(0xFF66, 0xFF9E):   # ｦ .. ﾝ
        for mark in "\uff9e\uff9f":     # ﾞ ﾟ
            pair = chr(base) + mark
            char = unicodedata.normalize("NFKC", pair)
            if len(char) == 1 and sp.normalize(pair).lstrip("\u2581") == char:
                pairs.append((pair, char))
    return pairs


# a BPE SentencePiece model has no tokenizer.json form here, and transformers 5's AlbertTokenizer builds a Unigram from
# every spiece.model's pieces and scores, so it gives other ids than the model (on most lines of real text)
BPE_NOTE = ("a BPE SentencePiece model: transformers 5's AlbertTokenizer reads spiece.model as a unigram model and "
            "gives other ids on most lines; tokenize with sentencepiece or albertlm for this model")


def _sentencepiece_pipeline(tokenizer):
    from tokenizers import AddedToken, Tokenizer, decoders, normalizers, pre_tokenizers
    from tokenizers.models import Unigram

    from albertlm.interop.tf_checkpoint import parse_message

    options = tokenizer.options
    proto = parse_message(tokenizer.sp.serialized_model_proto())
    trainer = parse_message(proto[2][-1]) if 2 in proto else {}
    if trainer.get(3, [1])[-1] != 1:
        return None, BPE_NOTE
    normalizer = parse_message(proto[3][-1]) if 3 in proto else {}
    sp = tokenizer.sp
    vocab = [(sp.id_to_piece(i), sp.get_score(i)) for i in range(tokenizer.vocab_size)]
    if _digit_comma_rule(options):
        vocab = [(p, DIGIT_COMMA_SCORE if _ends_in_digit_comma(p) else score) for p, score in vocab]
    # a model trained with sentencepiece's --byte_fallback writes a character outside its pieces as the pieces of its
    # UTF-8 bytes (<0xED><0x95><0x9C>), as albertlm and sentencepiece encode it; without it, tokenizers' Unigram gives
    # <unk> there (a model pretrained on byte ids read <unk> after export)
    byte_fallback = bool(trainer.get(35, [0])[-1])   # trainer_spec.byte_fallback
    pipeline = Tokenizer(Unigram(vocab, unk_id=sp.unk_id(), byte_fallback=byte_fallback))
    steps = [normalizers.Replace("``", '"'), normalizers.Replace("''", '"')]
    if not options.keep_accents:
        steps += [normalizers.NFKD(), normalizers.StripAccents()]
    if options.do_lower_case:
        steps.append(normalizers.Lowercase())
    charsmap = normalizer.get(2, [b""])[-1]
    if charsmap:
        # sentencepiece's normalizer composes decomposed Hangul (NFD text, or NFKD from accent stripping) into
        # syllables; `tokenizers`' Precompiled looks up graphemes of under 6 bytes only, so a jamo syllable
        # (9 bytes) stayed jamo and became <unk>. NFC first composes it; the charsmap's NFKC includes NFC.
        # Half-width katakana with a sound mark ("ﾃﾞ", "ﾊﾟ": 6 bytes) are the same case, but NFC leaves them (the
        # composition is NFKC's, and NFKC itself would also fold the "～" the charsmap keeps): each pair the
        # model composes is replaced by its character first.
        steps += [normalizers.Replace(pair, char) for pair, char in _halfwidth_kana_pairs(tokenizer.sp)]
        steps += [normalizers.NFC(), normalizers.Precompiled(charsmap)]
    pipeline.normalizer = normalizers.Sequence(steps)
    pipeline.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                                      pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")])
    metaspace = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    # byte pieces back to their characters first (sentencepiece's decode; an incomplete sequence is U+FFFD in both)
    pipeline.decoder = decoders.Sequence([decoders.ByteFallback(), metaspace]) if byte_fallback else metaspace
    special = [tokenizer.id_to_token(i) for i in sorted({tokenizer.pad_id, tokenizer.unk_id, tokenizer.cls_id,
                                                          tokenizer.sep_id, tokenizer.mask_id})]
    pipeline.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special])
    if getattr(options, "split_added_tokens", False):  # transformers v5's added tokens (see the options)
        user = [sp.id_to_piece(i) for i in range(tokenizer.vocab_size)
                if sp.get_score(i) == 0.0 and not (sp.is_unused(i) or sp.is_control(i) or sp.is_unknown(i))]
        pipeline.add_tokens([AddedToken(p, normalized=False) for p in user if p not in special])
    return pipeline, None


# google's `encode_pieces` rule (on by default in our SentencePiece tokenizers) re-splits a piece ending in a digit and
# a comma ("▁2005," -> "▁2005" ","); a tokenizer.json has no step after segmentation, so such pieces get a score no
# segmentation prefers: the unigram then splits the comma off itself. Not the rule by construction (where the
# second-best segmentation of a word is not google's re-encoding, e.g. "1990,000940"), but the same ids on every
# digit-comma line of the text in ../shared/data (tests/test_interop_audit15.py).
DIGIT_COMMA_SCORE = -1e4


def _digit_comma_rule(options) -> bool:
    rule = getattr(options, "digit_comma_rule", None)
    if rule is None:   # options without the property: the field alone (None = google's default, on)
        value = getattr(options, "split_digit_comma", None)
        rule = value if value is not None else not getattr(options, "split_added_tokens", False)
    return bool(rule)


def _ends_in_digit_comma(piece: str) -> bool:
    return len(piece) > 1 and piece[-1] == "," and piece[-2].isdigit()


def complete_export(model: nn.Module, directory: str | Path, source: str | Path | None,
                    tokenizer_path: str | Path | None, warnings: list[str] | None = None) -> list[str]:
    """After `export_hf`: the tokenizer files (when a tokenizer is found) and README.md. Returns lines for
    the convert summary. A tokenizer that cannot be loaded is reported, not fatal (its files were copied).
    Warnings (no tokenizer.json for a BPE model; transformers 5 would give other ids) go to `warnings` as their
    text, for the caller to say (`errors.say_warning`); without that list they are lines of the summary in the
    CLI's one form, `albertlm <command>: warning: ...` (`errors.warning_line`; they began with a bare `warning:`)."""
    from albertlm.errors import warning_line
    from albertlm.tokenization import load_tokenizer

    directory = user_path(directory)   # `source` and `tokenizer_path` are read expanded, shown as given
    notes, written = [], []
    said: list[str] = []
    if tokenizer_path is not None:
        try:
            tokenizer = load_tokenizer(tokenizer_path)
            written, why_not = export_tokenizer(tokenizer, directory)
            if why_not is BPE_NOTE:
                said.append(f"no tokenizer.json: {why_not}")
            _special_ids_into_config(tokenizer, Path(directory))
            if "tokenizer.json" in written:   # (may write tokenizer_config.json: before its model_max_length)
                said += _rebuild_warning(tokenizer, Path(directory))
                if "tokenizer_config.json" not in written and (Path(directory) / "tokenizer_config.json").is_file():
                    written = sorted(written + ["tokenizer_config.json"])
            _max_length_into_tokenizer_config(model, Path(directory), source)
            notes.append(f"tokenizer files from {tokenizer_path}: {', '.join(written)}"
                         + (f" (no tokenizer.json: {why_not})" if why_not and why_not is not BPE_NOTE else ""))
        except UserError as exc:
            notes.append(f"tokenizer files not written ({exc})")
    if warnings is not None:
        warnings += said
    else:
        notes += [warning_line(text) for text in said]
    card = write_model_card(model, directory, source, written)
    return notes + [f"model card: {card}"]


def _max_length_into_tokenizer_config(model: nn.Module, directory: Path, source) -> None:
    """tokenizer_config.json's `model_max_length`: the fine-tuning's max_seq_length (best/'s task.json, or a
    step_N's run_config.json: `fine_tuning_record`), else the model's position embeddings, so that transformers'
    `truncation=True` cuts as albertlm does."""
    path = directory / "tokenizer_config.json"
    if not path.is_file():
        return
    limit = model.config.max_position_embeddings
    task = fine_tuning_record(user_path(source)) if source is not None else {}
    if isinstance(task.get("max_seq_length"), int):
        limit = min(limit, task["max_seq_length"])
    data = json.loads(path.read_text(encoding="utf-8"))
    path.write_text(json.dumps({**data, "model_max_length": limit}, indent=2) + "\n", encoding="utf-8")


def _special_ids_into_config(tokenizer, directory: Path) -> None:
    """config.json's bos/eos token ids as the exported tokenizer's [CLS]/[SEP]: `config_to_hf` writes ALBERT's
    SentencePiece ids (2, 3), which a WordPiece vocabulary (albert_zh: [CLS] 101, [SEP] 102) does not
    share, and generation and pipeline code read them from the config."""
    path = directory / "config.json"
    if not path.is_file():
        return
    config = json.loads(path.read_text(encoding="utf-8"))
    wanted = {"bos_token_id": tokenizer.cls_id, "eos_token_id": tokenizer.sep_id}   # pad: the model's own field
    if any(config.get(key) != value for key, value in wanted.items()):
        path.write_text(json.dumps({**config, **wanted}, indent=2) + "\n", encoding="utf-8")


# the class tokenizer_config.json names where transformers 5's AlbertTokenizer would give other ids than the exported
# tokenizer.json: AutoTokenizer (and pipeline()) then load tokenizer.json as written (transformers 5's
# TokenizersBackend, of which PreTrainedTokenizerFast is the name transformers 4 and 5 both know)
FAST_TOKENIZER_CLASS = "PreTrainedTokenizerFast"

# what the rebuild warnings say now happens (tokenizer_config.json names FAST_TOKENIZER_CLASS)
_AUTO_READS_IT = (f"; AutoTokenizer and pipeline() load this directory's tokenizer.json as written, with albertlm's "
                  f"ids (tokenizer_config.json names {FAST_TOKENIZER_CLASS}): only AlbertTokenizer named explicitly "
                  "rebuilds it")


def _rebuild_warning(tokenizer, directory: Path) -> list[str]:
    """Where transformers 5's AlbertTokenizer (AutoTokenizer's class for an ALBERT directory whose tokenizer_config.json
    names none or that one) would give other ids than the exported tokenizer.json: its rebuilt normalizer (above), and
    its Unigram rebuilt without the byte fallback a model trained with sentencepiece's `--byte_fallback` has and with
    <unk> at id 1 (`_rebuilt_unigram_warnings`), tokenizer_config.json names `FAST_TOKENIZER_CLASS` instead, so that
    AutoTokenizer and pipeline() read tokenizer.json as written (`_name_fast_tokenizer`); returns the convert
    summary's warnings (their text, one each) for what AlbertTokenizer, named explicitly, still does."""
    from tokenizers import Tokenizer

    pipeline = Tokenizer.from_file(str(directory / "tokenizer.json"))
    model = _albert_rebuilds(pipeline, directory)
    if model is None:
        if _albert_cannot_read(pipeline, directory):
            _name_fast_tokenizer(tokenizer, directory)
        return []
    count, example = transformers5_rebuild_differences(tokenizer, pipeline)
    said = (_normalizer_warning(tokenizer, count, example) if count else []) + \
        _tokenizer_json_rebuild_warning(tokenizer, pipeline, directory) + \
        _rebuilt_unigram_warnings(tokenizer, pipeline, model)
    if said:
        _name_fast_tokenizer(tokenizer, directory)
    return [text + _AUTO_READS_IT for text in said]


def _albert_rebuilds(pipeline, directory: Path) -> dict | None:
    """The tokenizer.json's Unigram model (a dict) where transformers 5 rebuilds it: `AlbertTokenizer`, AutoTokenizer's
    class for an ALBERT directory whose tokenizer_config.json names none or that one; else None."""
    model = json.loads(pipeline.to_str())["model"]
    named = json_object_or_empty(Path(directory) / "tokenizer_config.json").get("tokenizer_class")
    return model if model.get("type") == "Unigram" and named in (None, "AlbertTokenizer", "AlbertTokenizerFast") \
        else None


def _albert_cannot_read(pipeline, directory: Path) -> bool:
    """A tokenizer.json of another model than a Unigram (a WordPiece `--tokenizer tokenizer.json` without a
    tokenizer_config.json) where AutoTokenizer would take AlbertTokenizer: it builds a Unigram of the vocabulary and
    fails (`TypeError: 'dict' object is not an instance of 'Sequence'`), so the export did not load at all."""
    model = json.loads(pipeline.to_str())["model"]
    named = json_object_or_empty(Path(directory) / "tokenizer_config.json").get("tokenizer_class")
    return model.get("type") != "Unigram" and named in (None, "AlbertTokenizer", "AlbertTokenizerFast")


def _name_fast_tokenizer(tokenizer, directory: Path) -> None:
    """tokenizer_config.json's `tokenizer_class` as `FAST_TOKENIZER_CLASS` (the file written if there was none, as
    beside a tokenizer.json source without one), with the special tokens as this tokenizer's pieces (that class has
    no ALBERT defaults to fall back on) and the token_type_ids ALBERT reads; the rest (the preprocessing options,
    model_max_length) as written. spiece.model stays beside it: albertlm reads that first."""
    path = Path(directory) / "tokenizer_config.json"
    data = json_object_or_empty(path)
    names = {key: tokenizer.id_to_token(getattr(tokenizer, f"{name}_id")) for key, name in (
        ("pad_token", "pad"), ("unk_token", "unk"), ("cls_token", "cls"), ("sep_token", "sep"),
        ("mask_token", "mask"), ("bos_token", "cls"), ("eos_token", "sep"))}
    data = {"tokenizer_class": FAST_TOKENIZER_CLASS, **data, **names}   # a new key goes first, an old one stays put
    data["tokenizer_class"] = FAST_TOKENIZER_CLASS
    data.setdefault("model_input_names", ["input_ids", "token_type_ids", "attention_mask"])
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


# texts besides a vocabulary's own pieces on which a tokenizer.json source is compared with AlbertTokenizer's rebuild
_REBUILD_PROBES = ("Hello World", "The Café déjà vu", "``Quoted''", "ÅNGSTRÖM naïve", "한국어 문장입니다",
                   "ﾃﾞｰﾀ ﾊﾟｿｺﾝ", "Ｆｕｌｌ　ｗｉｄｔｈ", "ß ﬁ ²")


def _tokenizer_json_rebuild_warning(tokenizer, pipeline, directory: Path) -> list[str]:
    """A tokenizer.json source (no spiece.model: tokenizers' own Unigram, or a file transformers saved) whose
    normalizer or pre-tokenizer transformers 5's AlbertTokenizer does not rebuild as written: it keeps the vocabulary
    and the charsmap but builds the rest from tokenizer_config.json's `do_lower_case` / `keep_accents` (True / False
    where it names none: a cased tokenizer.json without a tokenizer_config.json was lowercased and accent-stripped
    there, every KorNLI line other ids, without a word). Compared on the vocabulary's pieces and `_REBUILD_PROBES`,
    with the file's own <unk> id and byte fallback (warned of on their own)."""
    from tokenizers import AddedToken, Tokenizer, normalizers, pre_tokenizers
    from tokenizers.models import Unigram

    if type(tokenizer).__name__ != "TokenizerJsonTokenizer":
        return []
    data = json.loads(pipeline.to_str())
    model = data["model"]
    options = json_object_or_empty(Path(directory) / "tokenizer_config.json")
    lower, keep = options.get("do_lower_case", True), options.get("keep_accents", False)
    rebuilt = Tokenizer(Unigram([tuple(entry) for entry in model["vocab"]], unk_id=model.get("unk_id"),
                                byte_fallback=bool(model.get("byte_fallback"))))
    for added in data.get("added_tokens") or []:   # transformers 5 adds the file's added tokens back as they are
        token = AddedToken(added["content"], single_word=added.get("single_word", False),
                           lstrip=added.get("lstrip", False), rstrip=added.get("rstrip", False),
                           normalized=added.get("normalized", True), special=added.get("special", False))
        (rebuilt.add_special_tokens if token.special else rebuilt.add_tokens)([token])
    steps = [normalizers.Replace("``", '"'), normalizers.Replace("''", '"')]
    steps += [] if keep else [normalizers.NFKD(), normalizers.StripAccents()]
    steps += [normalizers.Lowercase()] if lower else []
    found = [step for step in ((data.get("normalizer") or {}).get("normalizers") or [data.get("normalizer") or {}])
             if step.get("type") == "Precompiled" and step.get("precompiled_charsmap")]
    if found:
        import base64

        steps.append(normalizers.Precompiled(base64.b64decode(found[0]["precompiled_charsmap"])))
    rebuilt.normalizer = normalizers.Sequence(steps)
    rebuilt.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                                     pre_tokenizers.Metaspace(replacement="\u2581",
                                                                              prepend_scheme="always")])
    special = {tokenizer.pad_id, tokenizer.unk_id, tokenizer.cls_id, tokenizer.sep_id, tokenizer.mask_id}
    texts = [entry[0].replace("\u2581", " ").strip() for i, entry in enumerate(model["vocab"]) if i not in special]
    texts = [t for t in texts if t and not re.fullmatch(r"<0x[0-9A-F]{2}>", t)] + list(_REBUILD_PROBES)
    ours = pipeline.encode_batch(texts, add_special_tokens=False)
    theirs = rebuilt.encode_batch(texts, add_special_tokens=False)
    differ = [t for t, a, b in zip(texts, ours, theirs) if a.ids != b.ids]
    if not differ:
        return []
    example = next((t for t in differ if t in _REBUILD_PROBES), differ[0])
    named = {"do_lower_case", "keep_accents"} & set(options)
    defaults = "" if named else " (ALBERT's defaults: the file names neither)"
    return [f"transformers 5's AlbertTokenizer.from_pretrained rebuilds this tokenizer's normalizer and pre-tokenizer "
            f"from tokenizer_config.json's do_lower_case ({json.dumps(lower)}) and keep_accents ({json.dumps(keep)})"
            f"{defaults}, not as tokenizer.json holds them, and encodes {len(differ):,} of its texts otherwise, e.g. "
            f"{example!r}"]


# characters tried, in this order, for the byte fallback warning's example: one the vocabulary lacks
_FALLBACK_EXAMPLES = "😀€ßéж中한語ñ"


def _rebuilt_unigram_warnings(tokenizer, pipeline, model: dict) -> list[str]:
    """transformers 5's AlbertTokenizer builds its Unigram with `byte_fallback=False` and `unk_id=1` (ALBERT's <unk>)
    whatever the tokenizer.json says: where our export keeps a `--byte_fallback` model's byte pieces, it reads such
    characters as <unk>; a model whose <unk> is another id (sentencepiece's default is 0) gets the piece at id 1 for
    every unknown character there. One warning each."""
    said = []
    if model.get("byte_fallback"):
        example = ""
        for char in _FALLBACK_EXAMPLES:
            pieces = pipeline.encode(char, add_special_tokens=False).tokens
            if any(re.fullmatch(r"<0x[0-9A-F]{2}>", p) for p in pieces):
                example = f", e.g. {char!r} ({''.join(p for p in pieces if p.startswith('<0x'))})"
                break
        said.append(f"transformers 5's AlbertTokenizer.from_pretrained rebuilds this tokenizer without its byte "
                    f"fallback: a character outside its {tokenizer.vocab_size:,} pieces is <unk> there, not the pieces "
                    f"of its UTF-8 bytes that albertlm and sentencepiece give{example}")
    if model.get("unk_id") not in (None, 1) and len(model.get("vocab") or []) >= 2:
        unk, other = model["unk_id"], model["vocab"][1][0]
        said.append(f"transformers 5's AlbertTokenizer.from_pretrained rebuilds this tokenizer with <unk> at id 1, "
                    f"ALBERT's, but this model's <unk> is id {unk}: an unknown character gets id 1 ({other!r}) there, "
                    f"not {unk}")
    return said


# a tokenizer.json that lost a byte-fallback model's fallback: the check is the tokenizer loader's (which warns at load)
from albertlm.tokenization.tokenizer_json import lost_byte_fallback  # noqa: E402,F401


def _normalizer_warning(tokenizer, count: int, example: str | None) -> list[str]:
    """The warning for `count` vocabulary pieces (`example` one) the rebuilt normalizer encodes otherwise."""
    if example and example[-1:] in "\uff9e\uff9f":
        return [f"transformers 5's AlbertTokenizer.from_pretrained rebuilds this tokenizer's normalizer "
                f"(no composition) and reads half-width katakana with a sound mark as two characters, e.g. "
                f"{example!r} for {unicodedata.normalize('NFKC', example)!r} ({count:,} forms of this vocabulary's "
                f"pieces get other ids than albertlm and sentencepiece)"]
    return [f"transformers 5's AlbertTokenizer.from_pretrained rebuilds this tokenizer's normalizer "
            f"(NFKD accent stripping, no recomposition) and encodes {count:,} of its {tokenizer.vocab_size:,} "
            f"pieces otherwise, e.g. {example!r} (Hangul becomes <unk>; a tokenizer trained without --strip-accents "
            "has none of this)"]


def write_model_card(model: nn.Module, directory: str | Path, source: str | Path | None = None,
                     tokenizer_files: list[str] | None = None) -> Path:
    """README.md for an exported model: the config, the parameter count, and, when `source` is a
    checkpoint of an albertlm run, the training data (the data build's meta.json) and the run's measured
    metrics (pretraining: the eval record of the checkpoint's step in metrics.jsonl; fine-tuning: the
    best dev scores in metrics.json)."""
    directory = user_path(directory)
    cfg = model.config
    name = type(model).__name__
    params = sum(p.numel() for p in model.parameters())
    run = run_facts(source) if source is not None else {}
    task = "fill-mask" if name in ("AlbertForPreTraining", "AlbertForMaskedLM") else _PIPELINE_TAGS.get(name)
    lines = ["---", "library_name: transformers", "tags:", "- albert", "- albertlm"]
    lines += [f"pipeline_tag: {task}"] if task else []
    lines += ["---", "", f"# {directory.name}", "",
              f"An ALBERT model (Lan et al., 2020, arXiv 1909.11942), `{name}`, exported by albertlm "
              f"(`albertlm convert ... --to hf`) from `{source}`." if source else "", "",
              "## Model", "", "| field | value |", "|---|---|"]
    rows = {"parameters": f"{params:,} ({params / 1e6:.1f}M, shared weights counted once)",
            "vocabulary V": cfg.vocab_size, "embedding size E": cfg.embedding_size, "hidden size H": cfg.hidden_size,
            "layers L": cfg.num_layers, "attention heads A": cfg.num_heads, "FFN size I": cfg.ffn_size,
            "sharing": f"{cfg.sharing} ({cfg.num_groups} group(s))", "activation": cfg.activation,
            "max positions": cfg.max_position_embeddings}
    lines += [f"| {k} | {v} |" for k, v in rows.items()]
    lines += ["", "## Training data", ""] + (run.get("data") or ["Not recorded (the source is not an albertlm run)."])
    lines += ["", "## Measured metrics", ""] + (run.get("metrics") or ["None recorded with the source."])
    auto = _AUTO_CLASSES.get(name, "AutoModel")
    lines += ["", "## Use", "", "```python", f"from transformers import {auto}, AutoTokenizer, pipeline", ""]
    if task == "fill-mask":
        lines += [f'fill = pipeline("fill-mask", model="{directory.name}")', 'fill("The capital of France is [MASK].")']
    lines += [f'tokenizer = AutoTokenizer.from_pretrained("{directory.name}")',
              f'model = {auto}.from_pretrained("{directory.name}")', "```", ""]
    if task == "fill-mask":
        lines += ["```bash", f'albertlm fill-mask {directory.name} "The capital of France is [MASK]."', "```", ""]
    lines += [f"Files: config.json, model.safetensors, {', '.join(tokenizer_files or []) or 'no tokenizer'}."]
    path = directory / "README.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


_PIPELINE_TAGS = {"AlbertForSequenceClassification": "text-classification",
                  "AlbertForTokenClassification": "token-classification",
                  "AlbertForQuestionAnswering": "question-answering", "AlbertForMultipleChoice": "multiple-choice",
                  "AlbertModel": "feature-extraction"}


_AUTO_CLASSES = {"AlbertForSequenceClassification": "AutoModelForSequenceClassification",
                 "AlbertForTokenClassification": "AutoModelForTokenClassification",
                 "AlbertForQuestionAnswering": "AutoModelForQuestionAnswering",
                 "AlbertForMultipleChoice": "AutoModelForMultipleChoice"}


def run_facts(checkpoint: str | Path) -> dict[str, list[str]]:
    """Markdown lines about the run a checkpoint came from: {"data": [...], "metrics": [...]}."""
    checkpoint = user_path(checkpoint)
    facts: dict[str, list[str]] = {}
    step_match = re.fullmatch(r"step_(\d+)", checkpoint.name)
    run_dir = checkpoint.parent.parent if step_match and checkpoint.parent.name == "checkpoints" else checkpoint.parent
    run_config = next((p for p in (checkpoint / "run_config.json", run_dir / "run_config.json") if p.is_file()), None)
    tuned = fine_tuning_record(checkpoint)   # a fine-tuning run's step_N (best/ is told from its metrics.json below)
    if run_config is not None and not tuned:
        data = json_object_or_empty(run_config).get("data")
        data_dir = data.get("path") if isinstance(data, dict) else None
        meta = json_object_or_empty(Path(data_dir) / "meta.json") if data_dir else {}
        if meta:
            corpus = meta.get("counts", {}).get("corpus", {})
            # a build of more than 1,000 files lists none (`inputs`): its --input arguments and file count instead
            listed = meta.get("inputs") or meta.get("input_arguments") or []
            count = meta.get("num_input_files", len(meta.get("inputs", [])))
            facts["data"] = [
                f"- pretraining data `{data_dir}`: {meta.get('num_instances', 0):,} instances of "
                f"{meta.get('max_seq_length')} tokens, sentence task `{meta.get('sentence_task')}`, "
                f"masking `{meta.get('masking', {}).get('mode')}`, dupe factor {meta.get('dupe_factor')}",
                f"- built from {count:,} file(s) "
                f"({', '.join(Path(p).name for p in listed[:5])}"
                f"{', ...' if len(listed) > 5 or len(listed) < count else ''}): {corpus.get('documents', 0):,} documents, "
                f"{corpus.get('sentences', 0):,} sentences",
                f"- tokenizer: {meta.get('tokenizer', {}).get('kind')}, V={meta.get('tokenizer', {}).get('vocab_size')}"]
    step = int(step_match.group(1)) if step_match else None
    records = _metrics_records(run_dir / "metrics.jsonl")
    evals = [r for r in records if r.get("split") == "eval" and (step is None or r.get("step") == step)]
    if evals and checkpoint.name != "best":   # best/: the fine-tuning's metrics.json below says which step
        record = evals[-1]
        values = ", ".join(f"{k} {v:.4f}" if isinstance(v, (int, float)) else f"{k} {v}"   # null: a NaN score
                           for k, v in record.items() if k not in ("step", "split", "time"))
        # (albertlm's fine-tuning runs keep task.json in best/, not beside their steps: the step's own record)
        kind = "fine-tuning" if tuned or (run_dir / "task.json").is_file() else "pretraining"
        facts["metrics"] = [f"- held-out evaluation during {kind} at step {record['step']:,}: {values}",
                            f"- (run directory `{run_dir}`, metrics.jsonl)"]
    if tuned and checkpoint.name != "best":
        parts = [str(part) for part in (tuned.get("family"), tuned.get("task")) if part]
        where = f", the checkpoint of step {step:,} (see {run_dir / 'metrics.jsonl'})" if step is not None else ""
        facts["data"] = [f"- fine-tuned on {' '.join(parts)}{where}"]
    finetune = json_object_or_empty(checkpoint.parent / "metrics.json") if checkpoint.name == "best" else {}
    if finetune.get("best"):
        values = ", ".join(_flat_metrics(finetune["best"]))
        parts = [str(part) for part in (finetune.get("family"), finetune.get("task")) if part]
        facts["metrics"] = [f"- fine-tuning ({', '.join(parts)}): best {values}"]
        facts.setdefault("data", [f"- fine-tuned on {' '.join(parts)} (see {checkpoint.parent / 'metrics.json'})"])
    return facts


def _flat_metrics(values: dict, prefix: str = "") -> list[str]:
    """{"dev": {"accuracy": 0.53}, "step": 10} -> ["dev/accuracy 0.5300", "step 10"]."""
    out = []
    for key, value in values.items():
        if isinstance(value, dict):
            out += _flat_metrics(value, f"{prefix}{key}/")
        else:
            out.append(f"{prefix}{key} {value:.4f}" if isinstance(value, float) else f"{prefix}{key} {value}")
    return out




def _metrics_records(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    records = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    return records
