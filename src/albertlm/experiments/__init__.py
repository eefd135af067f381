"""The paper's experiments (`albertlm ablate`): grids of pretraining runs at a scale, evaluated the same
way, fine-tuned against no-pretraining baselines, and reported beside the paper's numbers.

Layer: above `tasks`, below `cli` (imports config, tokenization, data, model, training, tasks).
    grids.py       which runs reproduce which table (table3/4/5, dropout, figure1, paper, user files)
    scales.py      smoke / cpu / gpu: sizes, steps, batch, fine-tuning protocol
    evaluation.py  held-out MLM / SOP / NSP accuracy, Figure 1's layer transitions, parameter counts
    runner.py      prepare once, run jobs (resumable, --jobs), one result.json per job
    report.py      report.md (the paper's tables with its numbers beside ours), PNG plots, results.json
"""
