"""Load one signature of a SavedModel, not all of them.

``tf.saved_model.load`` rebuilds every function of an export before it answers: for a
translation export, nine signatures and their searches, of which a program calls one.
``load_signature`` hands TensorFlow's loader the export's graph with only the functions
that one signature calls (and the resources' own), and asks it for that signature and
the export's objects that are not functions (variables, tokenizers, assets, constants).
It relies on the loader's partial loading (``tf.__internal__.saved_model.load_partial``'s
machinery); where a TensorFlow version does not take the pruned graph, it returns
``None`` and the caller loads the whole export.
"""

from __future__ import annotations

import logging
from pathlib import Path

import tensorflow as tf

log = logging.getLogger(__name__)

# The children through which a resource (a tokenizer's SentencePiece model) names the
# functions that create, initialize and destroy it.
_RESOURCE_FUNCTIONS = ("_create_resource", "_initialize", "_destroy_resource")
_FUNCTION_KINDS = ("function", "bare_concrete_function")


def _node_functions(node) -> list[str]:
    """The concrete functions an object graph node names."""
    kind = node.WhichOneof("kind")
    if kind == "bare_concrete_function":
        return [node.bare_concrete_function.concrete_function_name]
    if kind == "function":
        return list(node.function.concrete_functions)
    return []


def _called_functions(function_def, library: dict) -> set[str]:
    """The library functions a function calls: as ops, or in ``func`` attributes
    (``While``'s body and cond, ``If``'s branches, ``PartitionedCall``'s ``f``)."""
    called = set()
    for node in function_def.node_def:
        if node.op in library:
            called.add(node.op)
        for value in node.attr.values():
            if value.HasField("func"):
                called.add(value.func.name)
            called.update(function.name for function in value.list.func)
    return called


def _closure(names, library: dict) -> set[str]:
    """``names`` and every function they call, transitively."""
    seen, stack = set(), list(names)
    while stack:
        name = stack.pop()
        if name in seen or name not in library:
            continue
        seen.add(name)
        stack.extend(_called_functions(library[name], library))
    return seen


def _pruned(saved_model, name: str) -> list[str] | None:
    """Prune ``saved_model`` (a parsed ``SavedModel`` proto, in place) to signature
    ``name``'s functions; the object paths to load, or ``None`` if it has no such signature."""
    meta_graph = saved_model.meta_graphs[0]
    graph = meta_graph.object_graph_def
    root = graph.nodes[0]
    children = {child.local_name: child.node_id for child in root.children}
    if "signatures" not in children:
        return None
    signatures = {c.local_name: c.node_id for c in graph.nodes[children["signatures"]].children}
    if name not in signatures:
        return None
    library = {f.signature.name: f for f in meta_graph.graph_def.library.function}
    resources = [
        function
        for node in graph.nodes
        for child in node.children
        if child.local_name in _RESOURCE_FUNCTIONS
        for function in _node_functions(graph.nodes[child.node_id])
    ]
    keep = _closure(_node_functions(graph.nodes[signatures[name]]) + resources, library)
    functions = meta_graph.graph_def.library
    kept = [library[function] for function in sorted(keep)]
    gradients = [gradient for gradient in functions.gradient if gradient.function_name in keep]
    del functions.function[:]
    functions.function.extend(kept)
    del functions.gradient[:]
    functions.gradient.extend(gradients)
    for function in list(graph.concrete_functions):
        if function not in keep:
            del graph.concrete_functions[function]
    objects = [
        f"root.{child}"
        for child, node_id in children.items()
        if child != "signatures" and graph.nodes[node_id].WhichOneof("kind") not in _FUNCTION_KINDS
    ]
    return [f"root.signatures.{name}", *objects]


class SignatureExport:
    """What ``load_signature`` loaded: ``signatures`` and the export's other root objects."""

    def __init__(self, signatures: dict):
        self.signatures = signatures


def load_signature(path: str | Path, name: str) -> SignatureExport | None:
    """Load signature ``name`` of the SavedModel at ``path`` and its objects, nothing else.

    Args:
        path: a SavedModel folder.
        name: one of its signatures.

    Returns:
        A ``SignatureExport`` with ``signatures`` (``{name: concrete function}``) and the export's
        root objects that are not functions as attributes (``beam_size_tensor``,
        ``source_spm``, ...); ``None`` where the export has no such signature or this
        TensorFlow's loader cannot load a part of it (load the whole export then).

    Example:

    >>> module = tf.Module()
    >>> module.double = tf.function(
    ...     lambda x: 2 * x, input_signature=[tf.TensorSpec([None], tf.float32)]
    ... )
    >>> tf.saved_model.save(module, "doubler", signatures={"double": module.double})
    >>> export = load_signature("doubler", "double")
    >>> export.signatures["double"](x=tf.constant([1.0, 2.0]))["output_0"].numpy()
    array([2., 4.], dtype=float32)
    """
    # Internal modules: a TensorFlow that moved them loads the whole export instead.
    try:
        from tensorflow.python.checkpoint import checkpoint_options
        from tensorflow.python.framework import ops
        from tensorflow.python.saved_model import load as saved_model_load
        from tensorflow.python.saved_model import loader_impl

        saved_model = loader_impl.parse_saved_model(str(path))
        paths = _pruned(saved_model, name)
        if paths is None:
            return None
        tf_logger = tf.get_logger()
        level = tf_logger.level
        # The objects left out hold no values of their own; the checkpoint's reader says
        # so in warnings about "unrestored values" when the loader lets it go.
        tf_logger.setLevel(logging.ERROR)
        try:
            with ops.init_scope():
                loader = saved_model_load.Loader(
                    saved_model.meta_graphs[0].object_graph_def,
                    saved_model,
                    str(path),
                    checkpoint_options.CheckpointOptions(),
                    tf.saved_model.LoadOptions(),
                    paths,
                )
                loaded = {object_path: loader.get(object_path) for object_path in paths}
        finally:
            tf_logger.setLevel(level)
    except Exception as error:  # noqa: BLE001  any failure: the whole export loads instead
        log.debug("loading signature %s of %s alone failed: %r", name, path, error)
        return None
    export = SignatureExport({name: loaded.pop(f"root.signatures.{name}")})
    for object_path, value in loaded.items():
        setattr(export, object_path[len("root.") :], value)
    return export
