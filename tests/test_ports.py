"""The test processes' ports (devtools.gunicorn.free_port): pytest-xdist workers pick from slices
that never overlap, below the range the kernel hands out itself."""

from __future__ import annotations

import itertools
import os
import socket
import subprocess
import sys

from devtools.gunicorn import _ephemeral_start, free_port

_SLICE_OF = "from devtools.gunicorn import _SLICE; print(_SLICE.start, _SLICE.stop)"


def _slice(worker: str) -> range:
    env = {**os.environ, "PYTEST_XDIST_WORKER": worker}
    command = [sys.executable, "-c", _SLICE_OF]
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    start, stop = map(int, out.stdout.split())
    return range(start, stop)


def test_workers_pick_from_disjoint_slices_below_the_kernels_range() -> None:
    slices = [_slice(f"gw{n}") for n in range(4)]
    for one, other in itertools.pairwise(slices):
        assert one.stop <= other.start, (one, other)
    assert slices[-1].stop <= _ephemeral_start()


def test_a_port_is_handed_out_once_and_is_free() -> None:
    ports = [free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", ports[-1]))
