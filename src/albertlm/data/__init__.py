"""Pretraining data (docs/data.md): text -> sentence pairs -> masked instances in memory-mapped shards, and
reading them back for training. Layer: above `tokenization` (imports config, tokenization and errors).

Start here:
    build.build, build.BuildConfig      `albertlm data build` from Python: returns a BuildSummary
    loader.PretrainingDataset           a built directory as a map-style dataset (ds[i]: dict of numpy arrays)
    loader.collate                      a list of instances -> the batch the model takes (torch tensors)
    corpus.split_sentences              the sentence splitter the build uses
    stats.compute_stats                 what `albertlm data stats` reports
"""
