"""RL: agents (TD3, SAC, PPO / IPPO), networks, buffers, optimiser plumbing, training loops and
PBT."""
