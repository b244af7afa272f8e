"""A plugin module as a user would write one: importing it registers the DDPG of
`user_agent.py` with the jobs (``eqx-qd --plugin user_plugin run pbt --agent ddpg``)."""

from user_agent import DDPG

from eqx_qd import jobs


@jobs.AGENTS.register("ddpg", help="DDPG (tests/user_agent.py)")
def make_ddpg(env, *, hidden=(32,), minibatch_size=32, num_envs=4, buffer_size=10_000):
    return DDPG(
        observation_size=env.observation_size, action_size=env.action_size, hidden=hidden[0],
        minibatch_size=minibatch_size, num_envs=num_envs, buffer_size=buffer_size,
    )  # fmt: skip
