"""Emitters: the contract, the GA emitter, composition, and the QD x RL emitters (PGA-ME's
policy-gradient emitter, ME-PBT's PBT emitter). Everything public is re-exported by `eqx_qd`."""
