"""Blocks of one registered design on a Ray cluster (``frank run ID --ray ADDRESS``), the store in one place.

The ``frank run`` process is the driver and the only writer of the campaign's store and registry; each
block is one Ray task on one host (every host offers the custom resource ``frank_host: 1``, a block asks
for one, so a host runs one block at a time), and its starts run there in registered arm order with the
local runner's own per-start code (:func:`frankenstein.design.runner.block_starts`); a start that could
not run (a file mismatch, a node that died) is :func:`frankenstein.design.failed.failed_start`.

    need.py      Ray importable, or one line saying how to install it; the address to use (option or frank.toml)
    host.py      which Ray node a block ran on (node id, node name, host name, address)
    checks.py    the files a start runs (engine binary, model files, a command arm's program and files), pinned
                 by sha256 at registration (design/pins.py), checked on the worker before each start
    content.py   the workload and an agent suite folder travel by content (bytes in Ray's object store,
                 hash checked on the worker); files a start writes into workloads/ travel back
    worker.py    the Ray task: one block's starts, streamed back one by one
    driver.py    submit blocks in block order (a resumed block back to its recorded host), record each start
                 as it comes back, node deaths, curtailment; ``auto`` resolved as Ray does
    local.py     a loopback cluster of ``ray start`` processes in its own network namespace (tests, benchmark)

Only ``worker.py``, ``driver.py`` and ``host.py`` import Ray; the CLI asks :func:`need.need_ray` before it
imports them. ``local.py`` (a loopback cluster of ``ray start`` processes in a network namespace, for tests
and the benchmark) runs Ray's command line, never imports it.
"""
