"""A user's agent, written outside the package against the public contract only: DDPG
(Lillicrap et al., 2016), one critic, gaussian exploration. The contract tests run it through
training, PBT and ME-PBT exactly like the built-in agents."""

import typing

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float, PyTree

import eqx_qd as q
from eqx_qd.rl import apply_adam, hparam, init_adam, soft_update


class DDPGHParams(q.rl.AbstractHParams):  # each field checked finite and in its range
    policy_lr: Float[Array, ""] = hparam(1e-3, low=0.0)
    critic_lr: Float[Array, ""] = hparam(1e-3, low=0.0)
    discount: Float[Array, ""] = hparam(0.99, low=0.0, high=1.0)
    tau: Float[Array, ""] = hparam(0.005, low=0.0, high=1.0)
    noise: Float[Array, ""] = hparam(0.1, low=0.0)

    def default_spaces(self):
        return {"policy_lr": q.rl.LogUniform(1e-4, 1e-2), "critic_lr": q.rl.LogUniform(1e-4, 1e-2),
                "noise": q.rl.Uniform(0.0, 0.3)}  # fmt: skip


class DDPGState(q.rl.AbstractAgentState):
    policy: q.rl.DeterministicPolicy
    critic: eqx.nn.MLP  # Q(obs ++ action)
    target_policy: q.rl.DeterministicPolicy | None
    target_critic: eqx.nn.MLP | None
    policy_opt: PyTree
    critic_opt: PyTree
    hparams: DDPGHParams
    normaliser: q.rl.RunningNormaliser | None = None


def _q(critic, obs, action):
    return critic(jnp.concatenate([obs, action]))


_none = lambda x: x is None


@typing.final
class DDPG(q.rl.AbstractOffPolicyAgent[DDPGState]):
    observation_size: int = eqx.field(static=True)
    action_size: int = eqx.field(static=True)
    hidden: int = eqx.field(default=32, static=True)
    minibatch_size: int = eqx.field(default=32, static=True)
    num_envs: int = eqx.field(default=4, static=True)
    buffer_size: int = eqx.field(default=10_000, static=True)
    grad_updates_per_step: float = eqx.field(default=1.0, static=True)
    normalise_observations: bool = eqx.field(default=False, static=True)

    def init(self, hparams=None, *, key):
        policy_key, critic_key = jr.split(key)
        policy = q.rl.DeterministicPolicy(
            self.observation_size, self.action_size, (self.hidden,), key=policy_key
        )
        size = self.observation_size + self.action_size
        critic = eqx.nn.MLP(size, "scalar", self.hidden, 1, key=critic_key)
        hparams = DDPGHParams() if hparams is None else hparams
        return self.init_optimiser_states(
            DDPGState(policy, critic, None, None, None, None, hparams)
        )

    def act(self, state, obs, *, deterministic=False, key):
        action = state.policy(obs)
        if deterministic:
            return action
        return jnp.clip(action + state.hparams.noise * jr.normal(key, action.shape), -1.0, 1.0)

    def update(self, state, batch, *, key):
        h, batched_q = state.hparams, jax.vmap(_q, in_axes=(None, 0, 0))
        next_action = jax.vmap(state.target_policy)(batch.next_obs)
        next_q = batched_q(state.target_critic, batch.next_obs, next_action)
        target = batch.reward + h.discount * (1.0 - batch.terminated) * next_q
        critic_loss = lambda c: jnp.mean((batched_q(c, batch.obs, batch.action) - target) ** 2)
        c_loss, grads = eqx.filter_value_and_grad(critic_loss)(state.critic)
        critic, critic_opt = apply_adam(state.critic, grads, state.critic_opt, h.critic_lr)
        policy_loss = lambda p: -jnp.mean(batched_q(critic, batch.obs, jax.vmap(p)(batch.obs)))
        p_loss, grads = eqx.filter_value_and_grad(policy_loss)(state.policy)
        policy, policy_opt = apply_adam(state.policy, grads, state.policy_opt, h.policy_lr)
        targets = (soft_update(state.target_policy, policy, h.tau),
                   soft_update(state.target_critic, critic, h.tau))  # fmt: skip
        state = eqx.tree_at(
            lambda s: (s.policy, s.critic, s.policy_opt, s.critic_opt, s.target_policy,
                       s.target_critic),
            state, (policy, critic, policy_opt, critic_opt, *targets),
        )  # fmt: skip
        return state, {"critic_loss": c_loss, "policy_loss": p_loss}

    def empty_optimiser_states(self, state):
        parts = lambda s: (s.policy_opt, s.critic_opt, s.target_policy, s.target_critic)
        return eqx.tree_at(parts, state, (None,) * 4, is_leaf=_none)

    def init_optimiser_states(self, state):
        opts = (init_adam(state.policy), init_adam(state.critic))
        state = eqx.tree_at(lambda s: (s.policy_opt, s.critic_opt), state, opts, is_leaf=_none)
        return self.reset_targets(state)

    def reset_targets(self, state):
        parts = lambda s: (s.target_policy, s.target_critic)
        return eqx.tree_at(parts, state, (state.policy, state.critic), is_leaf=_none)

    def genome(self, state):
        return state.policy, state.critic

    def with_genome(self, state, genome):
        return eqx.tree_at(lambda s: (s.policy, s.critic), state, tuple(genome))
