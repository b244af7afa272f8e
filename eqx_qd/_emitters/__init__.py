"""Emitters of the QD core: the contract (`AbstractEmitter`, `Lineage`), the GA emitter and
composition. The QD x RL emitters (PGA-ME, ME-PBT) live in `eqx_qd._qdrl`."""
