"""QD x RL: policy scoring and re-evaluation, the PGA-ME and ME-PBT emitters (the floor between
the QD core and `eqx_qd.rl`)."""
