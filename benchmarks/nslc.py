"""What the novelty parents and archives cost at a given size: `NSLCSelector.choose` and
`NoveltySelector.choose` drawing 64 parents from `--capacity` stored elites (2-D descriptors,
every slot filled), and one `add` of 128 candidates into a full `UnstructuredRepertoire` and
`DNSRepertoire` of that capacity. Median of 5 calls after a compiled warm-up; one JSON line.

Usage: python benchmarks/nslc.py [--capacity 2500] [--seed 0]
"""

import argparse
import json

from dns import _median_call  # (this folder: the scripts run from it)


def main(capacity: int, seed: int) -> dict:
    import equinox as eqx
    import jax
    import jax.random as jr

    import eqx_qd as q

    k1, k2, k3, k4, k5 = jr.split(jr.key(seed), 5)
    fitnesses = jr.normal(k1, (capacity,))
    descriptors = jr.uniform(k2, (capacity, 2))
    out = {"capacity": capacity, "jax": jax.__version__}
    for name, selector in (
        ("nslc_select_s", q.NSLCSelector()),
        ("novelty_select_s", q.NoveltySelector()),
    ):
        choose = eqx.filter_jit(lambda f, d, k, s=selector: s.choose(f, d, 64, key=k))
        out[name] = _median_call(
            lambda c=choose: jax.block_until_ready(c(fitnesses, descriptors, k3))
        )
    genotypes = jr.uniform(k4, (capacity, 8))
    batch = (jr.uniform(k5, (128, 8)), jr.uniform(k5, (128, 2)), jr.normal(k5, (128,)))
    add = eqx.filter_jit(lambda r, g, d, f: r.add(g, d, f)[0])
    for name, empty in (
        ("unstructured_add_s", q.UnstructuredRepertoire.empty(capacity, genotypes[0], 2, k=15,
                                                              novelty_threshold=1e-6)),
        ("dns_add_s", q.DNSRepertoire.empty(capacity, genotypes[0], 2, k=3)),
    ):  # fmt: skip
        full = add(empty, genotypes, descriptors, fitnesses)
        out[name] = _median_call(lambda r=full: jax.block_until_ready(add(r, *batch)))
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capacity", type=int, default=2500)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(json.dumps(main(args.capacity, args.seed)))
