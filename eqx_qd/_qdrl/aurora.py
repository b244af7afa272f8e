"""AURORA's encoder (Grillotti and Cully, 2022, as QDax 0.5 runs it): a sequence
autoencoder over what each policy observed, whose code is the learned descriptor, trained
with Adam (optax, through the agents' `rl._optim`) on the observations the archive stores."""

import typing

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Bool, Float, Int, ScalarLike

from .. import _validate as check
from .._custom_types import PRNGKey
from .._misc import f32
from .._repertoire._aurora import AbstractObservationEncoder
from ..rl._optim import apply_adam, init_adam
from .scoring import ScoringExtra


def _encode(cell: eqx.nn.LSTMCell, xs: Float[Array, "time width"]):
    """The LSTM's last `(h, c)` after reading `xs` from zeros."""
    zero = jnp.zeros((cell.hidden_size,), xs.dtype)
    (h, c), _ = jax.lax.scan(lambda hc, x: (cell(x, hc), None), (zero, zero), xs)
    return h, c


def _reconstruction_loss(nets, xs: Float[Array, "time width"]) -> Float[Array, ""]:
    """Mean squared error of the teacher-forced decoder: from the code, step `t` reads the
    observation of step `t - 1` (zeros at the start) and predicts that of step `t`."""
    encoder_cell, decoder_cell, readout = nets
    hc = _encode(encoder_cell, xs)
    previous = jnp.concatenate([jnp.zeros_like(xs[:1]), xs[:-1]])

    def step(hc, x):
        hc = decoder_cell(x, hc)
        return hc, readout(hc[0])

    _, predicted = jax.lax.scan(step, hc, previous)
    return jnp.mean((predicted - xs) ** 2)


def _mean_loss(nets, xs: Float[Array, "batch time width"]) -> Float[Array, ""]:
    """`_reconstruction_loss` averaged over a batch of (normalised) sequences."""
    return jnp.mean(jax.vmap(lambda x: _reconstruction_loss(nets, x))(xs))


@typing.final
class SequenceAutoencoder(AbstractObservationEncoder):
    """An LSTM sequence autoencoder over each episode's observations, every `every`-th step's
    first `width` numbers (QDax's `observation_option="no_sd"`, `traj_sampling_freq`,
    `max_observation_size`): the learned descriptor is the encoder LSTM's last cell state
    (`latent_size` numbers, QDax's `hidden_size`; the cell state, as QDax's, is unbounded
    where the hidden state lies in (-1, 1)), read after normalising each observation number
    by the archive's mean and standard deviation.

    `retrained`: Adam (`learning_rate`) from fresh moments, each epoch `capacity //
    batch_size` steps on batches drawn uniformly from the stored observations (QDax's
    `lstm_ae_train`), on the reconstruction error of a teacher-forced LSTM decoder started
    from the code. Each training starts from the first weights (`start`), as QDax's does;
    with `warm_start`, from the current ones (on walker2d, measured no better: the design
    notes).
    Differences from QDax's `Seq2seq`: the decoder carries its own state from
    step to step (QDax's re-reads the code at every step), the start token is zeros (QDax's
    -1000), and the normalisation counts only the stored rows (QDax's counts the empty slots'
    zeros).

    **Fields:** the three networks (`encoder_cell` and `decoder_cell`, `eqx.nn.LSTMCell`, and
    `readout`, the decoder's `eqx.nn.Linear`), `start` (the three as first drawn), `mean` and
    `std` `(width,)`, `learning_rate` (float32
    leaf), and the static `observation_shape` `(length, width)`, `latent_size`, `every`,
    `batch_size` and `warm_start`. Build one with `SequenceAutoencoder.for_episodes`.
    """

    encoder_cell: eqx.nn.LSTMCell
    decoder_cell: eqx.nn.LSTMCell
    readout: eqx.nn.Linear
    start: tuple[eqx.nn.LSTMCell, eqx.nn.LSTMCell, eqx.nn.Linear]
    mean: Float[Array, " width"]
    std: Float[Array, " width"]
    learning_rate: Float[Array, ""] = eqx.field(converter=f32)
    observation_shape: tuple[int, ...] = eqx.field(static=True)
    latent_size: int = eqx.field(static=True)
    every: int = eqx.field(static=True)
    batch_size: int = eqx.field(static=True)
    warm_start: bool = eqx.field(static=True, default=False)

    @classmethod
    def for_episodes(
        cls,
        observation_size: int,
        episode_length: int,
        *,
        latent_size: int = 5,
        every: int = 10,
        width: int = 25,
        batch_size: int = 128,
        learning_rate: ScalarLike = 1e-4,
        warm_start: bool = False,
        key: PRNGKey,
    ) -> "SequenceAutoencoder":
        """An untrained autoencoder for episodes of `episode_length` steps of observations of
        `observation_size` numbers (QDax's notebook's settings by default; `latent_size`,
        `every`, `width`, `batch_size`, `learning_rate` and `warm_start` as in the class)."""
        owner = "SequenceAutoencoder.for_episodes"
        for name, value in (
            ("observation_size", observation_size),
            ("episode_length", episode_length),
            ("latent_size", latent_size),
            ("every", every),
            ("width", width),
            ("batch_size", batch_size),
        ):
            check.positive_int(f"{owner}: {name}", value)
        check.positive(f"{owner}: learning_rate", learning_rate)
        width = min(width, observation_size)
        length = len(range(0, episode_length, every))
        k1, k2, k3 = jr.split(key, 3)
        nets = (
            eqx.nn.LSTMCell(width, latent_size, key=k1),
            eqx.nn.LSTMCell(width, latent_size, key=k2),
            eqx.nn.Linear(latent_size, width, key=k3),
        )
        return cls(
            encoder_cell=nets[0],
            decoder_cell=nets[1],
            readout=nets[2],
            start=nets,
            mean=jnp.zeros((width,), jnp.float32),
            std=jnp.ones((width,), jnp.float32),
            learning_rate=learning_rate,
            observation_shape=(length, width),
            latent_size=latent_size,
            every=every,
            batch_size=batch_size,
            warm_start=warm_start,
        )

    def observe(self, extra: ScoringExtra) -> Float[Array, "batch length width"]:
        """Every `every`-th step's first `width` observation numbers of each episode."""
        if not isinstance(extra, ScoringExtra):
            raise TypeError(
                "SequenceAutoencoder.observe: extra must be the ScoringExtra of a PolicyScorer, "
                f"got {type(extra).__name__}"
            )
        length, width = self.observation_shape
        obs = extra.episodes.transitions.obs[:, :: self.every, :width]
        if obs.shape[1:] != (length, width):
            raise ValueError(
                f"SequenceAutoencoder.observe: the episodes give observations {obs.shape[1:]}, "
                f"the encoder was built for {(length, width)} (episode length or observation "
                "size changed)"
            )
        return obs

    def _normalised(self, observations):
        return (observations - self.mean[None, None]) / self.std[None, None]

    def __call__(
        self, observations: Float[Array, "batch length width"]
    ) -> Float[Array, "batch latent"]:
        """The codes of a batch of observations."""
        xs = self._normalised(observations)
        return jax.vmap(lambda x: _encode(self.encoder_cell, x)[1])(xs)

    def loss(self, observations: Float[Array, "batch length width"]) -> Float[Array, ""]:
        """The mean reconstruction error of a batch (normalised as `__call__` does)."""
        nets = (self.encoder_cell, self.decoder_cell, self.readout)
        return _mean_loss(nets, self._normalised(observations))

    def retrained(
        self,
        observations: Float[Array, "capacity length width"],
        filled: Bool[Array, " capacity"],
        epochs: Int[Array, ""],
        *,
        key: PRNGKey,
    ) -> "SequenceAutoencoder":
        """A copy with the stored rows' normalisation, trained `epochs` epochs (see the class)."""
        capacity = observations.shape[0]
        count = jnp.maximum(jnp.sum(filled), 1)
        weight = filled[:, None, None].astype(jnp.float32)
        per_number = (count * observations.shape[1]).astype(jnp.float32)
        mean = jnp.sum(observations * weight, axis=(0, 1)) / per_number
        var = jnp.sum(((observations - mean[None, None]) ** 2) * weight, axis=(0, 1)) / per_number
        std = jnp.sqrt(var)
        std = jnp.where(std > 0, std, 1.0)
        model = eqx.tree_at(lambda m: (m.mean, m.std), self, (mean, std))
        rows = jnp.argsort(~filled, stable=True)  # the stored rows first
        batch = min(self.batch_size, capacity)
        steps = max(1, capacity // batch)
        nets = (model.encoder_cell, model.decoder_cell, model.readout)
        nets = nets if self.warm_start else self.start
        params, static = eqx.partition(nets, eqx.is_inexact_array)
        xs = model._normalised(observations)

        def batch_loss(p, idx):
            return _mean_loss(eqx.combine(p, static), xs[idx])

        def one_step(carry, idx):
            p, state = carry
            grads = jax.grad(batch_loss)(p, idx)
            return apply_adam(p, grads, state, self.learning_rate), None

        def epoch(_, carry):
            p, state, k = carry
            k, draw = jr.split(k)
            idx = rows[jr.randint(draw, (steps, batch), 0, count)]
            (p, state), _ = jax.lax.scan(one_step, (p, state), idx)
            return p, state, k

        params, _, _ = jax.lax.fori_loop(0, epochs, epoch, (params, init_adam(params), key))
        encoder_cell, decoder_cell, readout = eqx.combine(params, static)
        return eqx.tree_at(
            lambda m: (m.encoder_cell, m.decoder_cell, m.readout),
            model,
            (encoder_cell, decoder_cell, readout),
        )
