"""Discount Model Search's archive: CMA-MAE's per-cell thresholds become a small neural network
of the descriptors, trained inside the step (Tjanaka, Chen, Fontaine and Nikolaidis, 2026)."""

import typing
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jax.flatten_util import ravel_pytree
from jaxtyping import Array, Bool, Float, Int, PyTree, ScalarLike

from .. import _validate as check
from .._custom_types import Extra, Genotypes, PRNGKey
from .._misc import f32, i32, random_permutation
from .._tessellation import AbstractTessellation
from ._base import AddInfo, AddStatus, valid_candidates
from ._guided import _elitist, AbstractGuidedRepertoire, StoredKey
from ._tessellated import MAPElitesRepertoire


DiscountModel = Callable[[Float[Array, " num_descriptors"]], Float[Array, ""]]
"""A module mapping one (normalised) descriptor to its discount value: a scalar or `(1,)`."""


def discount_mlp(num_descriptors: int, *, key: PRNGKey) -> eqx.nn.MLP:
    """The paper's discount model (pyribs' sphere example): a ReLU MLP with two hidden layers
    of 128 and one linear output, initialised as PyTorch's `nn.Linear` is (weights and biases
    uniform in `+-1/sqrt(fan_in)`)."""
    return eqx.nn.MLP(num_descriptors, "scalar", 128, 2, activation=jax.nn.relu, key=key)


class TrainingData(eqx.Module):
    """One regression of the discount model: `descriptors` `(n, num_descriptors)` and
    `targets` `(n,)` where `used` `(n,)` (fixed shapes; unused rows are padding)."""

    descriptors: Float[Array, "n num_descriptors"]
    targets: Float[Array, " n"]
    used: Bool[Array, " n"]


@typing.final
class DiscountModelRepertoire(AbstractGuidedRepertoire):
    """Discount Model Search's archive (pyribs' `DiscountArchive` and `DiscountModelManager`
    with its result archive): an elitist `MAPElitesRepertoire` (`result`) keeps the elites,
    and a neural network of the descriptors, the discount model, takes the place of CMA-MAE's
    per-cell thresholds.

    `add` gives each candidate the improvement value `fitness - discount(descriptor)`
    (`AddInfo.value`, what `ImprovementRanker` sorts by; `threshold_status` is `NEW` where it is
    positive), inserts the batch in the result archive, then trains the model (Adam, minibatches
    of `train_batch_size`, reshuffled each epoch, at most `train_epochs` epochs, stopping after
    the first whose mean squared error is at most `train_cutoff_loss`) towards

    - at each candidate's descriptor, CMA-MAE's threshold rule: `(1 - learning_rate) * discount
      + learning_rate * fitness` where the fitness passed the discount, else the discount;
    - at the centres of up to `empty_points` cells of the result archive still empty, drawn
      without replacement: `threshold_min`.

    The model starts (in `empty`) trained towards `threshold_min` at `init_train_points` cell
    centres. Descriptors are scaled to `[-1, 1]` over the tessellation's extent (a grid's
    bounds, a CVT's centroids' box) before the model sees them; with `discount_range=(low,
    high)` its outputs are read on `[0, 1]` over that range (pyribs'
    `normalize_discount="zero_one"`). The whole step, training included, is one
    compiled program; pyribs trains after `tell` from what `add` cached, the same data in the
    same order.

    Build one with `DiscountModelRepertoire.empty` (its arguments describe the settings).

    **Fields:** `result` (the elitist archive); `model` and `initial_model` (the discount model
    now and as built, which `emptied` starts from); `opt_state` (its `AdamState`); `stream` and
    `initial_stream` (the archive's random stream, a `StoredKey`); `learning_rate`,
    `threshold_min`, `train_cutoff_loss`, `train_learning_rate`, `discount_low` /
    `discount_high` (`discount_range`, or `None`), `init_train_points`, `empty_points`,
    `train_epochs`, `train_batch_size`; `last_loss` and `last_epochs`, the latest training's
    final epoch loss and its number of epochs.
    """

    result: MAPElitesRepertoire
    model: PyTree
    initial_model: PyTree
    opt_state: "AdamState"
    stream: StoredKey
    initial_stream: StoredKey
    learning_rate: Float[Array, ""] = eqx.field(converter=f32)
    threshold_min: Float[Array, ""] = eqx.field(converter=f32)
    train_cutoff_loss: Float[Array, ""] = eqx.field(converter=f32)
    train_learning_rate: Float[Array, ""] = eqx.field(converter=f32)
    discount_low: Float[Array, ""] | None
    discount_high: Float[Array, ""] | None
    last_loss: Float[Array, ""] = eqx.field(converter=f32)
    last_epochs: Int[Array, ""] = eqx.field(converter=i32)
    init_train_points: int = eqx.field(static=True)
    empty_points: int = eqx.field(static=True)
    train_epochs: int = eqx.field(static=True)
    train_batch_size: int = eqx.field(static=True)

    def __check_init__(self):
        check.in_range("DiscountModelRepertoire.learning_rate", self.learning_rate, 0.0, 1.0)
        check.finite("DiscountModelRepertoire.threshold_min", self.threshold_min)
        check.non_negative("DiscountModelRepertoire.train_cutoff_loss", self.train_cutoff_loss)
        check.positive("DiscountModelRepertoire.train_learning_rate", self.train_learning_rate)
        if (self.discount_low is None) != (self.discount_high is None):
            raise ValueError("DiscountModelRepertoire: discount_low and discount_high go together")
        if self.discount_low is not None:
            check.ordered(
                "DiscountModelRepertoire: discount_range low",
                self.discount_low,
                "high",
                self.discount_high,
            )

    @classmethod
    def empty(
        cls,
        tessellation: AbstractTessellation,
        genotype: Genotypes,
        extra: Extra = None,
        *,
        model: PyTree | None = None,
        learning_rate: ScalarLike = 0.1,
        threshold_min: ScalarLike = 0.0,
        init_train_points: int = 1000,
        empty_points: int = 100,
        train_epochs: int = 5,
        train_cutoff_loss: ScalarLike = 0.05,
        train_batch_size: int = 32,
        train_learning_rate: ScalarLike = 1e-3,
        discount_range: tuple[ScalarLike, ScalarLike] | None = None,
        key: PRNGKey,
    ) -> "DiscountModelRepertoire":
        """An empty archive over `tessellation` (slots shaped like one unbatched `genotype`
        and `extra`) with its discount model trained towards `threshold_min`.

        **Arguments** (defaults: the paper's, as pyribs' sphere example sets them):

        - `model`: an Equinox module from one descriptor to a discount value; default
          `discount_mlp` (128 x 128, ReLU), drawn from `key`.
        - `learning_rate` (0.1), `threshold_min` (0, finite): CMA-MAE's threshold rule.
        - `init_train_points` (1000), `empty_points` (100): cell centres in the first training
          and in each later one.
        - `train_epochs` (5), `train_cutoff_loss` (0.05), `train_batch_size` (32).
        - `train_learning_rate` (0.001): Adam's step (PyTorch's betas and epsilon).
        - `discount_range`: `(low, high)` of the fitnesses, to train on `[0, 1]` (pyribs'
          example: the objective's range); `None` trains on the fitnesses as they are.
        - `key`: the model's initialisation, the empty cells' draws and the shuffles.
        """
        owner = "DiscountModelRepertoire.empty"
        for name, value in [
            ("init_train_points", init_train_points),
            ("empty_points", empty_points),
            ("train_epochs", train_epochs),
            ("train_batch_size", train_batch_size),
        ]:
            check.positive_int(f"{owner}: {name}", value)
        result = _elitist(tessellation, genotype, extra, owner)
        model_key, key = jr.split(key)
        if model is None:
            model = discount_mlp(tessellation.num_descriptors, key=model_key)
        low = high = None
        if discount_range is not None:
            low, high = f32(discount_range[0]), f32(discount_range[1])
        repertoire = cls(
            result=result,
            model=model,
            initial_model=model,
            opt_state=AdamState.of(model),
            stream=StoredKey.of(key),
            initial_stream=StoredKey.of(key),
            learning_rate=learning_rate,
            threshold_min=threshold_min,
            train_cutoff_loss=train_cutoff_loss,
            train_learning_rate=train_learning_rate,
            discount_low=low,
            discount_high=high,
            last_loss=jnp.nan,
            last_epochs=0,
            init_train_points=init_train_points,
            empty_points=empty_points,
            train_epochs=train_epochs,
            train_batch_size=train_batch_size,
        )
        repertoire._check_model(owner)
        return _first_training(repertoire)

    def emptied(self, genotype: Genotypes, extra: Extra = None) -> "DiscountModelRepertoire":
        """An empty archive with this one's cells, settings and initial model (untrained,
        trained again towards `threshold_min` from the initial key): the same archive
        `empty` built."""
        fresh = eqx.tree_at(
            lambda r: (r.result, r.model, r.opt_state, r.stream, r.last_loss, r.last_epochs),
            self,
            (
                _elitist(self.tessellation, genotype, extra, "DiscountModelRepertoire.emptied"),
                self.initial_model,
                AdamState.of(self.initial_model),
                self.initial_stream,
                f32(jnp.nan),
                i32(0),
            ),
        )
        return _first_training(fresh)

    def _check_model(self, owner: str) -> None:
        d = self.result.num_descriptors
        try:
            out = jax.eval_shape(self.model, jax.ShapeDtypeStruct((d,), jnp.float32))
        except Exception as e:  # the model cannot take one descriptor
            raise ValueError(
                f"{owner}: model must map one descriptor of shape ({d},) to a discount value; "
                f"calling it failed: {e}"
            ) from e
        if out.shape not in ((), (1,)):
            raise ValueError(
                f"{owner}: model must return a scalar or shape (1,) for one descriptor, got "
                f"{out.shape}"
            )

    def _scaled(self, descriptors: Float[Array, "n d"]) -> Float[Array, "n d"]:
        low, high = self.extent
        return 2.0 * (descriptors - low[None, :]) / (high - low)[None, :] - 1.0

    def _to_unit(self, values: Float[Array, " n"]) -> Float[Array, " n"]:
        if self.discount_low is None:
            return values
        return (values - self.discount_low) / (self.discount_high - self.discount_low)

    def _from_unit(self, values: Float[Array, " n"]) -> Float[Array, " n"]:
        if self.discount_low is None:
            return values
        return values * (self.discount_high - self.discount_low) + self.discount_low

    def discount(self, descriptors: Float[Array, "batch d"]) -> Float[Array, " batch"]:
        """The discount model's value at each descriptor `(batch, num_descriptors)`."""
        raw = jax.vmap(lambda x: jnp.reshape(self.model(x), ()))(self._scaled(descriptors))
        return self._from_unit(raw)

    def empty_centres(self, num: int, *, key: PRNGKey) -> TrainingData:
        """Up to `num` centres of cells of the result archive that hold no elite, drawn
        uniformly without replacement, with `threshold_min` as their targets (`used` marks
        how many there were)."""
        cells = self.tessellation.num_cells
        take = min(num, cells)
        scores = jnp.where(self.result.filled, jnp.inf, jr.uniform(key, (cells,)))
        _, idx = jax.lax.top_k(-scores, take)
        used = jnp.arange(take) < jnp.sum(~self.result.filled)
        descriptors = self.tessellation.centroids[idx]
        return TrainingData(descriptors, jnp.full((take,), self.threshold_min), used)

    def targets(
        self,
        descriptors: Float[Array, "batch num_descriptors"],
        fitnesses: Float[Array, " batch"],
        discount: Float[Array, " batch"],
    ) -> TrainingData:
        """The batch's training rows: at each valid candidate's `descriptors`, CMA-MAE's
        threshold rule on its `fitnesses` and the model's `discount` there (before training)."""
        valid = valid_candidates(fitnesses, descriptors)
        lr = self.learning_rate
        moved = jnp.where(fitnesses > discount, (1.0 - lr) * discount + lr * fitnesses, discount)
        safe = jnp.where(valid[:, None], descriptors, 0.0)
        return TrainingData(safe, jnp.where(valid, moved, 0.0), valid)

    def trained(self, data: TrainingData, *, key: PRNGKey) -> "DiscountModelRepertoire":
        """The archive after one regression of its model on `data` (see the class)."""
        model, opt_state, loss, epochs = _regress(
            self.model,
            self.train_learning_rate,
            self.opt_state,
            self._scaled(data.descriptors),
            self._to_unit(data.targets),
            data.used,
            epochs=self.train_epochs,
            batch_size=self.train_batch_size,
            cutoff=self.train_cutoff_loss,
            key=key,
        )
        return eqx.tree_at(
            lambda r: (r.model, r.opt_state, r.last_loss, r.last_epochs),
            self,
            (model, opt_state, loss, epochs),
        )

    def add(
        self,
        genotypes: Genotypes,
        descriptors: Float[Array, "batch num_descriptors"],
        fitnesses: Float[Array, " batch"],
        extra: Extra = None,
    ) -> tuple["DiscountModelRepertoire", AddInfo]:
        """Improvement values from the model as it is, the batch into the result archive, then
        one training of the model (see the class). `AddInfo.cell`, `status` and `delta` are
        the result archive's."""
        self.check_batch(genotypes, descriptors, fitnesses, extra)
        fitnesses = fitnesses.astype(jnp.float32)
        valid = valid_candidates(fitnesses, descriptors)
        discount = self.discount(jnp.where(valid[:, None], descriptors, 0.0).astype(jnp.float32))
        result, info = self.result.add(genotypes, descriptors, fitnesses, extra)
        key, empty_key, train_key = jr.split(self.stream.key, 3)
        after = eqx.tree_at(
            lambda r: (r.result, r.stream), self, (result, self.stream.replaced(key))
        )
        rows = after.targets(descriptors.astype(jnp.float32), fitnesses, discount)
        empty = after.empty_centres(self.empty_points, key=empty_key)
        data = jax.tree.map(lambda a, b: jnp.concatenate([a, b]), rows, empty)
        passed = valid & (fitnesses > discount)
        info = AddInfo(
            cell=info.cell,
            status=info.status,
            delta=info.delta,
            threshold_status=jnp.where(passed, AddStatus.NEW, AddStatus.NOT_ADDED).astype(
                jnp.int32
            ),
            value=jnp.where(valid, fitnesses - discount, jnp.nan),
        )
        return after.trained(data, key=train_key), info


def _first_training(repertoire: DiscountModelRepertoire) -> DiscountModelRepertoire:
    key, empty_key, train_key = jr.split(repertoire.stream.key, 3)
    repertoire = eqx.tree_at(lambda r: r.stream, repertoire, repertoire.stream.replaced(key))
    data = repertoire.empty_centres(repertoire.init_train_points, key=empty_key)
    return repertoire.trained(data, key=train_key)


class AdamState(eqx.Module):
    """PyTorch's Adam (pyribs' optimiser) over a model's parameters as one flat vector: the
    moments `(num_params,)` and the steps taken."""

    moment1: Float[Array, " num_params"]
    moment2: Float[Array, " num_params"]
    steps: Int[Array, ""] = eqx.field(converter=i32)

    @classmethod
    def of(cls, model: PyTree) -> "AdamState":
        flat, _ = ravel_pytree(eqx.filter(model, eqx.is_inexact_array))
        return cls(jnp.zeros_like(flat), jnp.zeros_like(flat), 0)

    def step(
        self, theta: Float[Array, " n"], grad: Float[Array, " n"], lr: Float[Array, ""]
    ) -> tuple[Float[Array, " n"], "AdamState"]:
        """`theta` after one step down `grad`: PyTorch's `Adam` (betas 0.9, 0.999, epsilon
        1e-8 added to the bias-corrected root), no weight decay."""
        steps = self.steps + 1
        t = steps.astype(jnp.float32)
        m = 0.9 * self.moment1 + 0.1 * grad
        v = 0.999 * self.moment2 + 0.001 * grad * grad
        denominator = jnp.sqrt(v) / jnp.sqrt(1.0 - 0.999**t) + 1e-8
        theta = theta - (lr / (1.0 - 0.9**t)) * m / denominator
        return theta, AdamState(m, v, steps)


@eqx.filter_jit
def _regress(model, learning_rate, opt_state, x, y, used, *, epochs, batch_size, cutoff, key):
    """Minibatch regression as pyribs' `DiscountModelManager.training_loop`: each epoch a
    fresh shuffle of the used rows in minibatches of `batch_size` (the last one partial), one
    Adam step per minibatch on its mean squared error; stop after `epochs` epochs or after the
    first whose loss (the minibatch losses weighted by their sizes, over the rows) is at most
    `cutoff`. The parameters travel as one flat vector (a few large operations per step rather
    than a few per layer). Returns the model, the optimiser state, the last epoch's loss and
    the epochs run."""
    n = x.shape[0]
    num_batches = -(-n // batch_size)
    padded = num_batches * batch_size
    count = jnp.sum(used, dtype=jnp.int32)
    params, static = eqx.partition(model, eqx.is_inexact_array)
    theta, unravel = ravel_pytree(params)

    def batch_loss(theta, xb, yb, mask):
        net = eqx.combine(unravel(theta), static)
        pred = jax.vmap(lambda v: jnp.reshape(net(v), ()))(xb)
        err = jnp.where(mask, (pred - yb) ** 2, 0.0)
        return jnp.sum(err) / jnp.maximum(jnp.sum(mask, dtype=jnp.float32), 1.0)

    grad_fn = jax.value_and_grad(batch_loss)

    def one_epoch(carry):
        theta, adam, key, _, done = carry
        key, shuffle_key = jr.split(key)
        order = random_permutation(n, key=shuffle_key)
        order = order[jnp.argsort(~used[order], stable=True)]  # the used rows, shuffled, first
        order = jnp.pad(order, (0, padded - n)).reshape(num_batches, batch_size)
        slots = jnp.arange(padded, dtype=jnp.int32).reshape(num_batches, batch_size)

        def one_batch(carry, batch):
            theta, adam, total = carry
            idx, slot = batch
            mask = slot < count
            loss, grad = grad_fn(theta, x[idx], y[idx], mask)
            stepped, stepped_adam = adam.step(theta, grad, learning_rate)
            # A minibatch past the used rows takes no step (Adam's count included).
            live = jnp.any(mask)
            theta, adam = jax.tree.map(
                lambda new, old: jnp.where(live, new, old), (stepped, stepped_adam), (theta, adam)
            )
            return (theta, adam, total + loss * jnp.sum(mask, dtype=jnp.float32)), None

        (theta, adam, total), _ = jax.lax.scan(
            one_batch, (theta, adam, jnp.float32(0.0)), (order, slots)
        )
        loss = total / jnp.maximum(count.astype(jnp.float32), 1.0)
        return theta, adam, key, loss, done + 1

    def go_on(carry):
        _, _, _, loss, done = carry
        return (done < epochs) & ((done == 0) | (loss > cutoff))

    theta, adam, _, loss, done = jax.lax.while_loop(
        go_on, one_epoch, (theta, opt_state, key, jnp.float32(jnp.nan), jnp.int32(0))
    )
    return eqx.combine(unravel(theta), static), adam, loss, done
