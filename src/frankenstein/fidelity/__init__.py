"""Fidelity: does a part change what the model says by more than the engine's own noise?

    kl.py       pure math: per-position KL(served ‖ candidate) over the top-k union + one tail
                bucket (a lower bound of the full-vocabulary KL), masses, top-1, Δp, summaries
    forced.py   forced decode of recorded continuations, per engine; the top-k artifact of a start
    compare.py  line up two starts, count bad engine output, pool pairs per workload position
    gate.py     the registered rule, its report lines, the gate a speed design names, the demo step

Designs of kind ``fidelity`` run and analyze through :mod:`frankenstein.design.kinds.fidelity`;
``frank fidelity check`` (unregistered A, B, A′) and ``frank fidelity fill`` are a use case above the
kinds, :mod:`frankenstein.design.quickcheck`.
See docs/fidelity.md.
"""
