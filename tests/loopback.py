"""Loopback helpers for the multi-worker tests."""

import json
import os
import socket
import subprocess

from hang_guard import HANG_TIMEOUT


def free_ports(count: int) -> list[int]:
    """``count`` TCP ports free on 127.0.0.1 right now (for a local TF_CONFIG cluster)."""
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def run_workers(argv_of, cwd, count: int = 2, timeout: float = HANG_TIMEOUT) -> list[str]:
    """Run ``count`` worker processes of one local TF_CONFIG cluster to the end.

    Args:
        argv_of: ``index -> argv`` of worker ``index`` (``sys.executable`` first).
        cwd: the workers' working directory.
        count: the cluster's workers.
        timeout: seconds each may take.

    Returns:
        Each worker's output (stdout and stderr together), in index order; every worker
        is asserted to have exited 0.
    """
    ports = free_ports(count)
    workers = []
    for index in range(count):
        tf_config = {
            "cluster": {"worker": [f"127.0.0.1:{port}" for port in ports]},
            "task": {"type": "worker", "index": index},
        }
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "TF_CONFIG": json.dumps(tf_config)}
        workers.append(
            subprocess.Popen(
                argv_of(index),
                cwd=cwd,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    outputs = [worker.communicate(timeout=timeout)[0] for worker in workers]
    for worker, output in zip(workers, outputs):
        assert worker.returncode == 0, output[-4000:]
    return outputs
