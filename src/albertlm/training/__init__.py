"""Training (docs/training.md): the loop shared by pretraining and fine-tuning, LAMB, checkpoints, metrics.
Layer: above `model` and `data` (imports config, tokenization, data, model and errors; never interop).

Start here:
    pretrain.pretrain                   `albertlm pretrain` from Python: pretrain(RunConfig(...), run_dir)
    evaluate.evaluate_checkpoint        held-out MLM / SOP (or NSP) loss and accuracy of any checkpoint
    lamb.Lamb, lamb.build_optimizer     the optimizer (google-research/albert's LAMB) and its parameter groups
    schedule.lr_at                      warmup then polynomial decay
    plots.plot_run                      PNG curves of a run directory
    metrics.read_metrics                a run's metrics.jsonl as a list of records
The run's notes (`step N train: ...`, `saved ...`, the summary) are printed on stdout, as the CLI's are; the
progress bar, warnings and errors go to stderr.
"""
