"""Other formats (docs/interop.md): Hugging Face transformers, google-research TensorFlow checkpoints, ONNX.
A side branch: above `model` (imports config, tokenization, model and errors); training never imports it.

Start here (every model class's `from_pretrained` reads a transformers ALBERT directory by itself):
    hf.export_hf, hf.import_hf          a model to / from a transformers directory
    tf.import_tf_checkpoint             google-research/albert `model.ckpt-N` + `albert_config.json` -> (model, report)
    onnx.export_onnx, onnx.quantize_int8   an ONNX graph of a model (needs the onnx extra), int8 weights
"""
