"""Fine-tuning, prediction and inference (docs/finetuning.md): GLUE, SQuAD, RACE and a user's own CSV/JSONL
classification data. Layer: above `training` (may import config, tokenization, data, model, interop, training).

Start here:
    specs.glue_spec, specs.squad_spec, specs.race_spec, specs.classify_spec   files -> a finetune.TaskSpec
    finetune.run_finetune               fine-tune a checkpoint on a TaskSpec; keeps the best dev model in OUT/best
    finetune.run_evaluation             score (and write predictions of) a fine-tuned checkpoint
    recipes.recipe                      the paper's fine-tuning hyperparameters, as a FinetuneConfig
    inference.FillMask, inference.embed_texts, inference.load_encoder   fill-mask and sentence embeddings
"""
