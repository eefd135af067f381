"""Write tests/fixtures/tf_albert_tiny/: tiny ALBERT checkpoints saved by TensorFlow itself.

Dev-time only: needs TensorFlow, which albertlm does not depend on and the tests never import.
Run it in a throwaway venv (never in the project's .venv):

    python3 -m venv /tmp/tfvenv && /tmp/tfvenv/bin/pip install tensorflow-cpu numpy
    /tmp/tfvenv/bin/pip install --no-deps albert-tensorflow   # google-research/ALBERT's own code
    TF_ENABLE_ONEDNN_OPTS=0 /tmp/tfvenv/bin/python tools/make_tf_fixture.py tests/fixtures/tf_albert_tiny

It builds variables with exactly the names and shapes google-research/ALBERT's `modeling.py` and
`run_pretraining.py` create (`bert/...`, `cls/predictions/...`, `cls/seq_relationship/...`), plus what
training adds to a checkpoint (`global_step`, LAMB/Adam `adam_m`/`adam_v` slots), and saves them with
`tf.compat.v1.train.Saver` the way google's TPUEstimator did. Next to each checkpoint it writes
`albert_config.json` (google's key names) and `expected.json`: dtype, shape, SHA-256 of the bytes and
sum of every variable as TensorFlow reads it back (`tf.train.load_variable`), so the tests check our
reader bit for bit against TF without storing the values twice.

Then it runs google-research/ALBERT's own `modeling.AlbertModel` and `run_pretraining`'s MLM and SOP
heads (PyPI `albert-tensorflow`, a packaging of that code; TF 2 lacks `tf.contrib.layers.layer_norm`
and Keras-2 `tf.layers.dense`, re-created below with the same variable names and epsilon), asserts that
the graph creates exactly the variable names written above, restores the checkpoint into it, and saves
its outputs on fixed inputs as `forward.npz`: the reference our imported model must reproduce.

Three checkpoints:
- `./`          E != H (16 vs 32), 2 groups, L=4, inner_group_num=1, one shard (the released layout).
- `inner2/`     E == H (no embedding_hidden_mapping_in), 1 group, inner_group_num=2, saved sharded
                over two CPU devices so the bundle has two data files.
- `dtypes/`     non-ALBERT probe variables in float16, bfloat16, float64, int32, int64, bool and
                scalar / 3-d / empty shapes: the reader's dtype and shape handling.

What TensorFlow 2.21 writes (checked with this script): the index is one uncompressed table block
(restart points every 16 keys) whatever the number of variables; TF's bundle writer turns table
compression off, so the reader's Snappy path is for other writers and is unit-tested by hand.
"""
from __future__ import annotations

import hashlib
import json
import sys
import types
from pathlib import Path

import ml_dtypes  # ships with tensorflow
import numpy as np
import tensorflow as tf

tf1 = tf.compat.v1

MAIN = dict(vocab_size=99, embedding_size=16, hidden_size=32, num_hidden_layers=4, num_hidden_groups=2,
            num_attention_heads=4, intermediate_size=37, inner_group_num=1, max_position_embeddings=64)
INNER2 = dict(vocab_size=99, embedding_size=32, hidden_size=32, num_hidden_layers=3, num_hidden_groups=1,
              num_attention_heads=4, intermediate_size=37, inner_group_num=2, max_position_embeddings=40)


def google_config(sizes: dict) -> dict:
    """An albert_config.json as google-research ships them (v2 style: no dropout)."""
    return {"attention_probs_dropout_prob": 0.0, "hidden_act": "gelu", "hidden_dropout_prob": 0.0,
            "initializer_range": 0.02, "type_vocab_size": 2, "down_scale_factor": 1, "gap_size": 0,
            "net_structure_type": 0, "num_memory_blocks": 0, **sizes}


def dense(prefix: str, n_in: int, n_out: int) -> dict[str, tuple[int, ...]]:
    return {f"{prefix}/kernel": (n_in, n_out), f"{prefix}/bias": (n_out,)}


def layer_norm(prefix: str, width: int) -> dict[str, tuple[int, ...]]:
    return {f"{prefix}/gamma": (width,), f"{prefix}/beta": (width,)}


def albert_variables(c: dict) -> dict[str, tuple[int, ...]]:
    """name -> shape, following modeling.py (AlbertModel) and run_pretraining.py (the two heads)."""
    V, E, H, I = c["vocab_size"], c["embedding_size"], c["hidden_size"], c["intermediate_size"]
    shapes = {"bert/embeddings/word_embeddings": (V, E),
              "bert/embeddings/token_type_embeddings": (c["type_vocab_size"], E),
              "bert/embeddings/position_embeddings": (c["max_position_embeddings"], E),
              **layer_norm("bert/embeddings/LayerNorm", E)}
    if E != H:  # transformer_model() projects only when the widths differ
        shapes.update(dense("bert/encoder/embedding_hidden_mapping_in", E, H))
    for g in range(c["num_hidden_groups"]):
        for k in range(c["inner_group_num"]):
            p = f"bert/encoder/transformer/group_{g}/inner_group_{k}"
            for proj in ("query", "key", "value"):
                shapes.update(dense(f"{p}/attention_1/self/{proj}", H, H))
            shapes.update(dense(f"{p}/attention_1/output/dense", H, H))
            shapes.update(layer_norm(f"{p}/LayerNorm", H))
            shapes.update(dense(f"{p}/ffn_1/intermediate/dense", H, I))
            shapes.update(dense(f"{p}/ffn_1/intermediate/output/dense", I, H))
            shapes.update(layer_norm(f"{p}/LayerNorm_1", H))
    shapes.update(dense("bert/pooler/dense", H, H))
    shapes.update(dense("cls/predictions/transform/dense", H, E))
    shapes.update(layer_norm("cls/predictions/transform/LayerNorm", E))
    shapes["cls/predictions/output_bias"] = (V,)
    shapes["cls/seq_relationship/output_weights"] = (2, H)
    shapes["cls/seq_relationship/output_bias"] = (2,)
    return shapes


def random_values(shapes: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Distinct non-trivial values everywhere (gamma around 1) so a swapped tensor cannot pass."""
    values = {}
    for name, shape in shapes.items():
        x = rng.normal(0.0, 0.2, size=shape).astype(np.float32)
        values[name] = (1.0 + x) if name.endswith("/gamma") else x
    return values


def training_state(values: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """What a run_pretraining checkpoint also holds: global_step and optimizer slots (LAMB and
    AdamWeightDecay both name them `<var>/adam_m`, `<var>/adam_v`)."""
    extra = {"global_step": np.array(125000, dtype=np.int64)}
    for name in ("bert/embeddings/word_embeddings", "cls/predictions/output_bias"):
        extra[f"{name}/adam_m"] = rng.normal(0.0, 1e-3, size=values[name].shape).astype(np.float32)
        extra[f"{name}/adam_v"] = rng.random(values[name].shape).astype(np.float32) * 1e-6
    return extra


def dtype_probes(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {"probe/float16": rng.normal(size=(3, 5)).astype(np.float16),
            "probe/bfloat16": rng.normal(size=(7,)).astype(ml_dtypes.bfloat16),
            "probe/float64": rng.normal(size=(2, 3, 4)),
            "probe/int32": rng.integers(-1000, 1000, size=(6,), dtype=np.int32),
            "probe/int64": rng.integers(-2**40, 2**40, size=(2, 2), dtype=np.int64),
            "probe/bool": rng.random(5) > 0.5,
            "probe/scalar": np.array(3.25, dtype=np.float32),
            "probe/empty": np.zeros((0, 4), dtype=np.float32)}


def save(values: dict, out: Path, num_devices: int = 1) -> None:
    """Save with a v1 Saver (V2 format, as TPUEstimator wrote them); spread over devices if asked,
    so `sharded=True` writes one data file per device."""
    out.mkdir(parents=True, exist_ok=True)
    graph = tf1.Graph()
    with graph.as_default():
        variables = []
        for i, (name, value) in enumerate(sorted(values.items())):
            with tf1.device(f"/cpu:{i % num_devices}"):
                variables.append(tf1.get_variable(name, initializer=tf.constant(value)))
        saver = tf1.train.Saver(variables, sharded=num_devices > 1)
        config = tf1.ConfigProto(device_count={"CPU": num_devices})
        with tf1.Session(graph=graph, config=config) as sess:
            sess.run(tf1.global_variables_initializer())
            saver.save(sess, str(out / "model.ckpt"), global_step=0, write_meta_graph=False)


def read_back(prefix: Path) -> dict[str, np.ndarray]:
    """Every variable as TensorFlow itself reads it: the reference our reader must match."""
    return {name: tf.train.load_variable(str(prefix), name) for name, _ in tf.train.list_variables(str(prefix))}


def write_fixture(out: Path, values: dict, num_devices: int = 1, config: dict | None = None) -> None:
    save(values, out, num_devices)
    expected = read_back(out / "model.ckpt-0")
    assert sorted(expected) == sorted(values), "TF lists other variables than we saved"
    for name, value in values.items():
        assert np.array_equal(expected[name], value), name
    summary = {name: {"dtype": value.dtype.name, "shape": list(value.shape),
                      "sha256": hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest(),
                      "sum": float(np.sum(value.astype(np.float64)))}
               for name, value in sorted(expected.items())}
    (out / "expected.json").write_text(json.dumps(summary, indent=1) + "\n")
    if config is not None:
        (out / "albert_config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    print(f"{out}: {len(values)} variables, tensorflow {tf.__version__}")


# --- google's own forward pass, as the reference for ours ------------------------------------------

class _V1Shim:
    """`import tensorflow as tf` for google's 2019 code on TF 2: the tf.compat.v1 API, with
    `tf.layers.dense` (gone with Keras 3) re-created under the same variable names."""

    def __getattr__(self, name):
        return getattr(tf1, name)

    layers = types.SimpleNamespace(dense=lambda *a, **k: _dense(*a, **k))


def _dense(inputs, units, activation=None, kernel_initializer=None, name=None):
    with tf1.variable_scope(name, default_name="dense"):
        kernel = tf1.get_variable("kernel", [inputs.shape[-1], units], initializer=kernel_initializer)
        bias = tf1.get_variable("bias", [units], initializer=tf1.zeros_initializer())
        out = tf.matmul(inputs, kernel) + bias
    return activation(out) if activation is not None else out


def _layer_norm(inputs, begin_norm_axis=-1, begin_params_axis=-1, scope=None):
    """tf.contrib.layers.layer_norm as google called it: scope `LayerNorm`, gamma/beta, epsilon 1e-12."""
    with tf1.variable_scope(scope, default_name="LayerNorm"):
        width = inputs.shape[-1]
        beta = tf1.get_variable("beta", [width], initializer=tf1.zeros_initializer())
        gamma = tf1.get_variable("gamma", [width], initializer=tf1.ones_initializer())
        mean, variance = tf.nn.moments(inputs, [inputs.shape.rank - 1], keepdims=True)
        return tf.nn.batch_normalization(inputs, mean, variance, beta, gamma, variance_epsilon=1e-12)


def import_google_albert():
    """google-research/ALBERT's modeling.py and run_pretraining.py from the PyPI package
    `albert-tensorflow` (`pip install --no-deps albert-tensorflow` into the throwaway venv)."""
    contrib = types.ModuleType("tensorflow.contrib")
    contrib.layers = types.SimpleNamespace(layer_norm=_layer_norm)
    contrib.cluster_resolver = contrib.data = contrib.tpu = types.SimpleNamespace()
    real = sys.modules["tensorflow"]
    sys.modules.update({"tensorflow": _V1Shim(), "tensorflow.contrib": contrib})
    try:
        from albert import modeling, run_pretraining
    finally:
        sys.modules["tensorflow"] = real
    return modeling, run_pretraining


def reference_inputs(sizes: dict) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    B, T, P = 3, 11, 3
    ids = rng.integers(0, sizes["vocab_size"], size=(B, T), dtype=np.int32)
    mask = np.ones((B, T), dtype=np.int32)
    mask[1, 7:] = 0  # padding
    mask[2, 9:] = 0
    types_ = (np.arange(T) >= 5).astype(np.int32)[None].repeat(B, 0)  # two segments
    positions = np.array([[1, 4, 6], [0, 2, 5], [3, 7, 8]], dtype=np.int32)
    return dict(input_ids=ids, input_mask=mask, token_type_ids=types_, masked_lm_positions=positions)


def google_forward(prefix: Path, config: dict, out: Path) -> None:
    """Build google's graph, check it creates exactly our variable names, restore the checkpoint into it
    and save its outputs on fixed inputs (forward.npz): the reference for our model on the imported
    weights."""
    modeling, run_pretraining = import_google_albert()
    inputs = reference_inputs(config)
    graph = tf1.Graph()
    with graph.as_default():
        cfg = modeling.AlbertConfig.from_dict(config)
        t = {k: tf.constant(v) for k, v in inputs.items()}
        model = modeling.AlbertModel(config=cfg, is_training=False, input_ids=t["input_ids"],
                                     input_mask=t["input_mask"], token_type_ids=t["token_type_ids"])
        positions = t["masked_lm_positions"]
        _, _, mlm_log_probs = run_pretraining.get_masked_lm_output(
            cfg, model.get_sequence_output(), model.get_embedding_table(), positions,
            tf.zeros_like(positions), tf.ones(positions.shape, tf.float32))
        _, _, sop_log_probs = run_pretraining.get_sentence_order_output(
            cfg, model.get_pooled_output(), tf.zeros([positions.shape[0]], tf.int32))
        names = {v.op.name for v in tf1.global_variables()}
        assert names == set(albert_variables(config)), names ^ set(albert_variables(config))
        with tf1.Session(graph=graph) as sess:
            tf1.train.Saver(tf1.global_variables()).restore(sess, str(prefix))
            outputs = sess.run(dict(sequence_output=model.get_sequence_output(),
                                    pooled_output=model.get_pooled_output(),
                                    mlm_log_probs=mlm_log_probs, sop_log_probs=sop_log_probs))
    np.savez_compressed(out / "forward.npz", **inputs, **outputs)
    print(f"{out}: google-research forward pass saved ({', '.join(outputs)})")


def main(out_dir: str) -> None:
    tf1.disable_eager_execution()
    root = Path(out_dir)
    rng = np.random.default_rng(20260522)
    values = random_values(albert_variables(google_config(MAIN)), rng)
    write_fixture(root, {**values, **training_state(values, rng)}, config=google_config(MAIN))
    values = random_values(albert_variables(google_config(INNER2)), rng)
    write_fixture(root / "inner2", values, num_devices=2, config=google_config(INNER2))
    for directory, sizes in ((root, MAIN), (root / "inner2", INNER2)):
        google_forward(directory / "model.ckpt-0", google_config(sizes), directory)
    write_fixture(root / "dtypes", dtype_probes(rng))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/tf_albert_tiny")
