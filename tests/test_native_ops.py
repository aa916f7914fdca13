"""The native LayerNorm op: off unless enabled; same values and gradients as
TensorFlow's ops, used only where it can run (training, CPU, outside XLA); a
private, hash-checked cache; and a clean fallback."""

import hashlib
import logging
import os
import shutil
import stat
from pathlib import Path
from types import SimpleNamespace

import keras
import numpy as np
import pytest
import tensorflow as tf
import yaml
from reference import layer_norm as reference_layer_norm

from keras_transformer.kernels import layer_norm, native
from keras_transformer.layers import LayerNormalization

pytestmark = pytest.mark.runtime

NATIVE_OPS = {"KerasTransformerLayerNorm", "KerasTransformerLayerNormGrad"}


CONFIGS = Path(__file__).resolve().parent.parent / "training" / "configs"
OTHER_UID = 65534  # nobody


@pytest.fixture(scope="module", autouse=True)
def private_cache(tmp_path_factory):
    """The module's tests never see the real home cache or the caller's setting:
    a cache in a temporary folder, the ops off until a test enables them."""
    with pytest.MonkeyPatch.context() as patch:
        cache = tmp_path_factory.mktemp("native") / "cache"
        patch.setenv("KERAS_TRANSFORMER_CACHE", str(cache))
        patch.delenv("KERAS_TRANSFORMER_NATIVE_OPS", raising=False)
        native.set_enabled(None)
        native._load_once.cache_clear()
        yield cache
        native._load_once.cache_clear()


@pytest.fixture(autouse=True)
def _switch_reset():
    yield
    native.set_enabled(None)


@pytest.fixture
def fresh_loader():
    """Forget the loaded (or failed) ops before and after: the loader caches its answer."""
    native._load_once.cache_clear()
    yield
    native._load_once.cache_clear()


@pytest.fixture(scope="module")
def ops(private_cache):
    """The real op, built into the module's cache, enabled for the rest of the module."""
    if shutil.which(native._compiler()) is None:
        pytest.skip(f"no C++ compiler ({native._compiler()}): the native op cannot be built here")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KERAS_TRANSFORMER_NATIVE_OPS", "1")
        native._load_once.cache_clear()
        module = native.load()
        assert module is not None, (
            "a C++ compiler is present, so the op must build (see the logged reason)"
        )
        yield module


def _values_and_gradients(x, gamma, beta, upstream, native_ops, function):
    def run(x, gamma, beta):
        with tf.GradientTape() as tape:
            tape.watch([x, gamma, beta])
            y = layer_norm(x, gamma, beta, 1e-6, native_ops)
            loss = tf.reduce_sum(y * upstream)
        return [y] + tape.gradient(loss, [x, gamma, beta])

    run = tf.function(run) if function else run
    return [t.numpy() for t in run(tf.constant(x), tf.constant(gamma), tf.constant(beta))]


@pytest.mark.parametrize("function", [False, True], ids=["eager", "tf.function"])
@pytest.mark.parametrize("shape", [(37, 256), (2, 5, 24), (0, 8)], ids=["rows", "rank3", "empty"])
def test_values_and_gradients_equal_tensorflow_ops(ops, shape, function):
    rng = np.random.default_rng(0)
    x = (rng.normal(size=shape) * 3 + 100).astype("float32")  # a large mean: two-pass variance
    gamma, beta = (rng.normal(size=shape[-1:]).astype("float32") for _ in range(2))
    upstream = rng.normal(size=shape).astype("float32")
    mine = _values_and_gradients(x, gamma, beta, upstream, ops, function)
    theirs = _values_and_gradients(x, gamma, beta, upstream, None, function)
    for name, a, b in zip(("y", "dx", "dgamma", "dbeta"), mine, theirs):
        assert a.shape == b.shape, name
        # Both are float32 with another summation order; inputs near 100 cost ~1e-5 in y
        # against a float64 reference for either path (2.5e-5 apart at most on AVX2).
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4, err_msg=name)
    np.testing.assert_allclose(
        mine[0], reference_layer_norm(x, gamma, beta, 1e-6), rtol=1e-4, atol=1e-4
    )
    # One fixed summation order per process: the same inputs give the same bits.
    again = _values_and_gradients(x, gamma, beta, upstream, ops, function)
    for a, b in zip(mine, again):
        np.testing.assert_array_equal(a, b)


def test_bad_shapes_name_the_problem(ops):
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"gamma must be \[8\]"):
        ops.keras_transformer_layer_norm(tf.ones([3, 8]), tf.ones([7]), tf.ones([7]), epsilon=1e-6)
    with pytest.raises(tf.errors.InvalidArgumentError, match="beta must have gamma's shape"):
        ops.keras_transformer_layer_norm(tf.ones([3, 8]), tf.ones([8]), tf.ones([4]), epsilon=1e-6)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"x must be \[rows, width\]"):
        ops.keras_transformer_layer_norm(tf.ones([8]), tf.ones([8]), tf.ones([8]), epsilon=1e-6)


def _op_types(layer, training, jit_compile=False):
    function = tf.function(lambda x: layer(x, training=training), jit_compile=jit_compile)
    x = tf.random.normal([2, 3, 8])
    function(x)  # runs, so XLA would have rejected an op it has no kernel for
    graph = function.get_concrete_function(x).graph
    types = {op.type for op in graph.get_operations()}
    for function_def in graph.as_graph_def().library.function:
        types |= {node.op for node in function_def.node_def}
    return types


@pytest.mark.xla_cpu
def test_used_in_training_only_and_never_under_xla(ops):
    layer = LayerNormalization(epsilon=1e-6)
    assert NATIVE_OPS & _op_types(layer, training=True) == {"KerasTransformerLayerNorm"}
    # Inference graphs (exports, TFLite) and XLA-compiled ones hold TensorFlow's ops only.
    assert not NATIVE_OPS & _op_types(layer, training=False)
    assert not NATIVE_OPS & _op_types(layer, training=True, jit_compile=True)


def test_layer_trains_the_same_with_the_native_op(ops, monkeypatch):
    rng = np.random.default_rng(1)
    x = (rng.normal(size=(4, 6, 16)) * 2 + 1).astype("float32")
    y = rng.normal(size=(4, 6, 16)).astype("float32")

    def one_step():
        keras.utils.set_random_seed(3)
        model = keras.Sequential(
            [keras.Input((6, 16)), keras.layers.Dense(16), LayerNormalization()]
        )
        model.compile(keras.optimizers.SGD(0.1), "mse")
        loss = model.fit(x, y, epochs=1, batch_size=4, verbose=0).history["loss"][0]
        return loss, [w.numpy() for w in model.weights]

    native_loss, native_weights = one_step()
    monkeypatch.setattr(native, "usable", lambda: None)
    loss, weights = one_step()
    assert native_loss == pytest.approx(loss, rel=1e-5)
    for a, b in zip(native_weights, weights):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_built_library_is_private_and_recorded(ops, private_cache):
    library = Path(os.path.realpath(private_cache)) / native.library_path().name
    assert stat.S_IMODE(os.stat(private_cache).st_mode) == 0o700
    assert stat.S_IMODE(os.lstat(library).st_mode) == 0o700
    record = native._hash_path(library)
    assert stat.S_IMODE(os.lstat(record).st_mode) == 0o600
    assert (
        record.read_text()
        == f"{hashlib.sha256(library.read_bytes()).hexdigest()}  {library.name}\n"
    )
    assert not [p.name for p in private_cache.iterdir() if p.name.startswith(".tmp-")]


@pytest.mark.parametrize("how", ["environment", "set_enabled"])
def test_turned_off_after_loading_it_is_not_used(ops, monkeypatch, fresh_loader, how):
    if how == "environment":
        monkeypatch.setenv("KERAS_TRANSFORMER_NATIVE_OPS", "0")
    else:
        native.set_enabled(False)  # wins over the module's KERAS_TRANSFORMER_NATIVE_OPS=1
    assert native.load() is None and native.usable() is None
    assert not NATIVE_OPS & _op_types(LayerNormalization(), training=True)


def test_failed_build_falls_back_with_the_reason(monkeypatch, fresh_loader, tmp_path, caplog):
    monkeypatch.setenv("KERAS_TRANSFORMER_NATIVE_OPS", "1")
    monkeypatch.setenv("KERAS_TRANSFORMER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("CXX", "false")  # a "compiler" that always fails
    with caplog.at_level(logging.WARNING, logger="keras_transformer.kernels.native"):
        assert native.load() is None
    assert "unavailable" in caplog.text and "false failed" in caplog.text
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [".lock"], (
        "no library may be left behind"
    )
    assert not NATIVE_OPS & _op_types(LayerNormalization(), training=True)
    layer = LayerNormalization()
    np.testing.assert_allclose(
        layer(tf.ones([2, 4]) * tf.range(4.0), training=True).numpy()[0],
        reference_layer_norm(
            np.arange(4.0, dtype="float32"), np.ones(4), np.zeros(4), layer.epsilon
        ),
        atol=1e-5,
    )


def test_library_is_keyed_on_what_it_was_built_against(monkeypatch):
    path = native.library_path()
    assert path.parent == native.cache_dir() and path.suffix == ".so"
    monkeypatch.setattr(native, "_cpu_features", lambda: "flags : another cpu")
    assert native.library_path() != path
    monkeypatch.setattr(native.tf, "__version__", "0.0.0")
    assert native.library_path() != path


def test_hung_compiler_times_out_and_falls_back(monkeypatch, fresh_loader, tmp_path, caplog):
    compiler = tmp_path / "hung-c++"
    compiler.write_text("#!/bin/sh\nexec sleep 30\n")
    compiler.chmod(0o755)
    monkeypatch.setenv("KERAS_TRANSFORMER_NATIVE_OPS", "1")
    monkeypatch.setenv("KERAS_TRANSFORMER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("CXX", str(compiler))
    monkeypatch.setattr(native, "_BUILD_TIMEOUT_S", 0.3)
    with caplog.at_level(logging.WARNING, logger="keras_transformer.kernels.native"):
        assert native.load() is None
    assert "timed out" in caplog.text


# --- opt-in, and the cache's checks (a stand-in compiler and loader: no build, no real load) ---

FAKE_LIBRARY = b"\x7fELF stand-in for the built op, build "


@pytest.fixture
def fake(monkeypatch, fresh_loader, tmp_path):
    """Ops enabled, a cache in ``tmp_path``, a compiler that returns numbered bytes
    and a ``tf.load_op_library`` that records the paths it is asked to load."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("KERAS_TRANSFORMER_CACHE", str(cache))
    monkeypatch.setenv("KERAS_TRANSFORMER_NATIVE_OPS", "1")
    state = SimpleNamespace(
        cache=cache, builds=0, loads=[], library=cache / native.library_path().name
    )

    def compile_():
        state.builds += 1
        return FAKE_LIBRARY + str(state.builds).encode()

    def load_op_library(path):
        state.loads.append(path)
        return SimpleNamespace(path=path)

    monkeypatch.setattr(native, "_compile", compile_)
    monkeypatch.setattr(native.tf, "load_op_library", load_op_library)
    return state


def _reload(caplog):
    native._load_once.cache_clear()
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="keras_transformer.kernels.native"):
        return native.load()


def _warnings(caplog):
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_off_by_default_builds_and_loads_nothing(fake, monkeypatch, caplog):
    monkeypatch.delenv("KERAS_TRANSFORMER_NATIVE_OPS")
    with caplog.at_level(logging.DEBUG, logger="keras_transformer.kernels.native"):
        assert not native.enabled()
        assert native.load() is None and native.usable() is None
        assert not NATIVE_OPS & _op_types(LayerNormalization(), training=True)
    assert fake.builds == 0 and fake.loads == []
    assert not fake.cache.exists(), "not even the cache directory is made"
    assert caplog.records == []


@pytest.mark.parametrize(
    "value, expected",
    [
        ("1", True),
        ("true", True),
        (" YES ", True),
        ("on", True),
        ("0", False),
        ("false", False),
        ("off", False),
        ("", False),
    ],
)
def test_environment_variable(monkeypatch, value, expected, caplog):
    monkeypatch.setenv("KERAS_TRANSFORMER_NATIVE_OPS", value)
    with caplog.at_level(logging.WARNING, logger="keras_transformer.kernels.native"):
        assert native.enabled() is expected
    assert caplog.records == []


def test_unknown_environment_value_is_off_with_a_warning(monkeypatch, caplog):
    monkeypatch.setenv("KERAS_TRANSFORMER_NATIVE_OPS", "sometimes")
    with caplog.at_level(logging.WARNING, logger="keras_transformer.kernels.native"):
        assert native.enabled() is False
    assert "'sometimes'" in caplog.text


def test_set_enabled_wins_over_the_environment(monkeypatch):
    monkeypatch.delenv("KERAS_TRANSFORMER_NATIVE_OPS", raising=False)
    native.set_enabled(True)
    assert native.enabled()
    monkeypatch.setenv("KERAS_TRANSFORMER_NATIVE_OPS", "1")
    native.set_enabled(False)
    assert not native.enabled()
    native.set_enabled(None)
    assert native.enabled()
    with pytest.raises(TypeError):
        native.set_enabled("yes")


def test_training_configs_leave_it_off():
    for path in sorted(CONFIGS.glob("*.yaml")):
        assert yaml.safe_load(path.read_text())["training"]["native_ops"] is False, path.name


def test_first_load_builds_into_a_private_directory(fake, caplog):
    module = _reload(caplog)
    assert (
        fake.builds == 1 and module.path == str(fake.library) and fake.loads == [str(fake.library)]
    )
    assert stat.S_IMODE(os.stat(fake.cache).st_mode) == 0o700
    assert stat.S_IMODE(os.lstat(fake.library).st_mode) == 0o700
    record = native._hash_path(fake.library)
    assert stat.S_IMODE(os.lstat(record).st_mode) == 0o600
    assert record.read_text().split() == [
        hashlib.sha256(FAKE_LIBRARY + b"1").hexdigest(),
        fake.library.name,
    ]
    assert _warnings(caplog) == []
    # The next process finds it, checks it, loads it without building.
    assert _reload(caplog).path == str(fake.library) and fake.builds == 1 and len(fake.loads) == 2


def _group_writable(state):
    state.library.chmod(0o720)


def _world_writable_record(state):
    native._hash_path(state.library).chmod(0o606)


def _symlink(state):
    real = state.library.with_name("elsewhere.so")  # same bytes: the recorded hash matches
    state.library.rename(real)
    state.library.symlink_to(real)


def _other_owner(state):
    os.chown(state.library, OTHER_UID, -1)


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")


@pytest.mark.parametrize(
    "tamper, reason",
    [
        (_group_writable, "is writable by others (mode 0720)"),
        (_world_writable_record, "hash record"),
        (_symlink, "is a symbolic link"),
        pytest.param(_other_owner, f"is owned by uid {OTHER_UID}", marks=needs_root),
    ],
    ids=["group-writable", "world-writable-hash", "symlink", "other-owner"],
)
def test_unsafe_library_is_refused(fake, caplog, tamper, reason):
    _reload(caplog)
    tamper(fake)
    fake.loads.clear()
    assert _reload(caplog) is None
    assert fake.loads == [] and fake.builds == 1, "neither loaded nor built over"
    (warning,) = _warnings(caplog)
    assert (
        warning.startswith("Refusing keras_transformer's native LayerNorm op") and reason in warning
    )
    assert "TensorFlow's ops" in warning
    # Training still runs, on TensorFlow's ops.
    assert not NATIVE_OPS & _op_types(LayerNormalization(), training=True)


@pytest.mark.parametrize("damage", ["other-bytes", "no-record", "truncated"])
def test_library_without_its_recorded_hash_is_rebuilt(fake, caplog, damage):
    _reload(caplog)
    if damage == "other-bytes":
        fake.library.write_bytes(b"\x7fELF something else")
    elif damage == "no-record":
        native._hash_path(fake.library).unlink()
    else:
        fake.library.write_bytes(fake.library.read_bytes()[:5])
    fake.loads.clear()
    module = _reload(caplog)
    (warning,) = _warnings(caplog)
    assert warning.startswith(f"Not loading {fake.library}") and "rebuilding it" in warning
    assert ("no sha256 recorded" if damage == "no-record" else "is not the recorded") in warning
    assert (
        fake.builds == 2 and module.path == str(fake.library) and fake.loads == [str(fake.library)]
    )
    assert fake.library.read_bytes() == FAKE_LIBRARY + b"2"
    assert (
        native._hash_path(fake.library).read_text().split()[0]
        == hashlib.sha256(FAKE_LIBRARY + b"2").hexdigest()
    )
    assert stat.S_IMODE(os.lstat(fake.library).st_mode) == 0o700


def _loose_mode(state):
    state.cache.mkdir(mode=0o755)
    state.cache.chmod(0o755)


def _other_owner_dir(state):
    state.cache.mkdir(mode=0o700)
    os.chown(state.cache, OTHER_UID, -1)


@pytest.mark.parametrize(
    "prepare, reason",
    [
        (_loose_mode, "has mode 0755; it must be private"),
        pytest.param(_other_owner_dir, f"is owned by uid {OTHER_UID}", marks=needs_root),
    ],
    ids=["mode-0755", "other-owner"],
)
def test_unsafe_cache_directory_is_refused(fake, caplog, prepare, reason):
    prepare(fake)
    before = os.stat(fake.cache)
    assert _reload(caplog) is None
    assert fake.builds == 0 and fake.loads == []
    (warning,) = _warnings(caplog)
    assert (
        warning.startswith("Refusing") and f"the cache directory {fake.cache} {reason}" in warning
    )
    after = os.stat(fake.cache)
    assert (after.st_mode, after.st_uid) == (before.st_mode, before.st_uid), "left as it was"
    assert list(fake.cache.iterdir()) == []


def test_cache_under_a_directory_others_can_write_is_refused(fake, caplog, monkeypatch, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # not sticky: anyone could rename the cache away and put theirs there
    monkeypatch.setenv("KERAS_TRANSFORMER_CACHE", str(shared / "cache"))
    assert _reload(caplog) is None
    assert fake.builds == 0 and fake.loads == [] and not (shared / "cache").exists()
    (warning,) = _warnings(caplog)
    assert f"{shared}, above the cache directory, is writable by others (mode 0777)" in warning
    shared.chmod(0o1777)  # sticky, like /tmp: only the owner may rename its entries
    assert _reload(caplog).path == str(shared / "cache" / fake.library.name)
