"""Pick a ``tf.distribute`` strategy by name.

Batch sizes in configs are global: the strategy splits each batch across replicas.
"""

from __future__ import annotations

import json
import logging
import os

import tensorflow as tf

log = logging.getLogger("training")

STRATEGIES = ("auto", "default", "mirrored", "multi_worker", "tpu")


def make_strategy(name: str = "auto", tpu_address: str | None = None) -> tf.distribute.Strategy:
    """``auto``: TPU if one is reachable, several GPUs → mirrored, else default.

    ``multi_worker`` reads the cluster from ``TF_CONFIG``; ``tpu`` connects with
    ``TPUClusterResolver`` (Colab: no address needed).
    """
    if name not in STRATEGIES:
        raise ValueError(f"Unknown strategy {name!r}; choose one of {STRATEGIES}.")
    if name == "auto":
        name = _detect()
    if name == "tpu":
        if tpu_address is None:
            # "" lets the resolver read COLAB_TPU_ADDR/TPU_NAME; a TPU VM is "local".
            tpu_address = "local" if _tpu_vm() and not _tpu_address_in_env() else ""
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu_address)
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        strategy = tf.distribute.TPUStrategy(resolver)
    elif name == "multi_worker":
        if "TF_CONFIG" not in os.environ:
            raise ValueError("strategy=multi_worker needs TF_CONFIG describing the cluster and this task.")
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    elif name == "mirrored":
        strategy = tf.distribute.MirroredStrategy()
    else:
        strategy = tf.distribute.get_strategy()
    log.info("strategy %s with %d replica(s)", type(strategy).__name__, strategy.num_replicas_in_sync)
    return strategy


def _tpu_address_in_env() -> bool:
    return bool(os.environ.get("COLAB_TPU_ADDR") or os.environ.get("TPU_NAME"))


def _tpu_vm() -> bool:
    """TPU VMs (current Colab TPU runtimes) set no address variable: look for the device files."""
    return os.path.exists("/dev/accel0") or os.path.exists("/dev/vfio/0")


def _detect() -> str:
    if os.environ.get("TF_CONFIG") and len(json.loads(os.environ["TF_CONFIG"]).get("cluster", {}).get("worker", [])) > 1:
        return "multi_worker"
    if _tpu_address_in_env() or _tpu_vm():
        return "tpu"
    if len(tf.config.list_logical_devices("GPU")) > 1:
        return "mirrored"
    return "default"
