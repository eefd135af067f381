"""The ALBERT model (docs/model.md): the backbone, its heads, and checkpoints. Torch modules only; no data,
no training. Layer: above `config` (imports config and errors only).

Start here (the classes are also `albertlm.AlbertModel`, ...):
    albert.AlbertModel              the backbone: factorized embeddings, cross-layer sharing, pooler
    albert.AlbertForPreTraining     + masked-LM and sentence-order heads (google's pretraining model)
    heads.AlbertForMaskedLM, heads.AlbertForSequenceClassification, heads.AlbertForTokenClassification,
    heads.AlbertForQuestionAnswering, heads.AlbertForMultipleChoice   the fine-tuning heads
    heads.AlbertForSquadV2          google-research's SQuAD v2.0 head (run_squad_v2.py: start/end beam, answer_class)
    io.resolve_checkpoint           a model directory, or a training run directory -> its newest checkpoint
    registry.load_saved_model       a directory -> the class it was saved from, loaded
    albert.enable_activation_checkpointing, fast_paths.apply_fast_paths   applied from outside the model
Every class has `Cls.from_pretrained(directory, **config_overrides)` (ours or a transformers ALBERT directory; a
training run directory is refused naming its models, `io.resolve_checkpoint` picks one) and
`model.save_pretrained(directory)` (model.safetensors + config.json, which replace an earlier model's files there
together; returns the directory). Either takes a str or a pathlib.Path, a leading `~` expanded. Loading a class
whose head the checkpoint lacks initialises that head freshly, with a warning naming the weights (a `classifier`
saved by another of the sequence / token / multiple-choice classes too, whatever its shape). A model built in code
is in training mode, as any torch module is: call `model.eval()` before predicting (dropout is on otherwise).
`from_pretrained` returns the model in eval mode, as transformers' does.
"""
