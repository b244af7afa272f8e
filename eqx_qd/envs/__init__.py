"""Environments: the single- and multi-agent protocols, rollouts, the point maze, brax QD tasks,
multi-agent brax and LineTargets. Everything public is re-exported by `eqx_qd`."""
