"""Pick a ``tf.distribute`` strategy by name.

Batch sizes in configs are global: the strategy splits each batch across replicas.
"""

from __future__ import annotations

import json
import logging
import os

log = logging.getLogger("training")

STRATEGIES = ("auto", "default", "mirrored", "multi_worker", "tpu")


class StrategyError(ValueError):
    """The strategy asked for cannot run here; the message says why and what to do."""


def tpu_runtime_available() -> bool:
    """Whether this TensorFlow can drive a TPU VM's chips: the ``libtpu`` runtime
    (installed with ``tensorflow-tpu``) is importable, or ``TPU_LIBRARY_PATH`` names one."""
    import importlib.util

    return (
        bool(os.environ.get("TPU_LIBRARY_PATH")) or importlib.util.find_spec("libtpu") is not None
    )


def _connect_tpu(tf, tpu_address: str | None):
    if tpu_address is None and not _tpu_address_in_env() and not tpu_runtime_available():
        raise StrategyError(
            f"--strategy tpu: this TensorFlow ({tf.__version__}) has no TPU support (no libtpu); "
            "on a TPU machine use tensorflow-tpu and install this project by the README's TPU path."
        )
    if tpu_address is None:
        # "" lets the resolver read COLAB_TPU_ADDR/TPU_NAME; a TPU VM is "local".
        tpu_address = "local" if _tpu_vm() and not _tpu_address_in_env() else ""
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu_address)
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except (ValueError, RuntimeError, tf.errors.OpError) as error:
        first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise StrategyError(f"--strategy tpu: no TPU could be reached ({first_line}).") from error
    return tf.distribute.TPUStrategy(resolver)


def make_strategy(name: str = "auto", tpu_address: str | None = None):
    """A ``tf.distribute.Strategy``. ``auto``: TPU if one is reachable, several GPUs →
    mirrored, else default.

    ``multi_worker`` reads the cluster from ``TF_CONFIG``; ``tpu`` connects with
    ``TPUClusterResolver`` (Colab: no address needed). TensorFlow is imported
    here, so that the programs can name the strategies before importing it.
    """
    import tensorflow as tf

    if name not in STRATEGIES:
        raise StrategyError(f"Unknown strategy {name!r}; choose one of {STRATEGIES}.")
    if name == "auto":
        name = _detect()
    if name == "tpu":
        strategy = _connect_tpu(tf, tpu_address)
    elif name == "multi_worker":
        if "TF_CONFIG" not in os.environ:
            raise StrategyError(
                "strategy=multi_worker needs TF_CONFIG describing the cluster and this task."
            )
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    elif name == "mirrored":
        strategy = tf.distribute.MirroredStrategy()
    else:
        strategy = tf.distribute.get_strategy()
    log.info(
        "strategy %s with %d replica(s)", type(strategy).__name__, strategy.num_replicas_in_sync
    )
    return strategy


def _tpu_address_in_env() -> bool:
    return bool(os.environ.get("COLAB_TPU_ADDR") or os.environ.get("TPU_NAME"))


def _tpu_vm() -> bool:
    """TPU VMs (current Colab TPU runtimes) set no address variable: look for the device files."""
    return os.path.exists("/dev/accel0") or os.path.exists("/dev/vfio/0")


def _detect() -> str:
    import tensorflow as tf

    if (
        os.environ.get("TF_CONFIG")
        and len(json.loads(os.environ["TF_CONFIG"]).get("cluster", {}).get("worker", [])) > 1
    ):
        return "multi_worker"
    if _tpu_address_in_env() or _tpu_vm():
        return "tpu"
    if len(tf.config.list_logical_devices("GPU")) > 1:
        return "mirrored"
    return "default"
