#!/usr/bin/env python3
"""JAX (XLA's compiled kernels, not PyTorch's): training steps of a 4-layer MLP with Adam-style
updates written in jax.numpy, batch 256; XLA fuses them into kernels of its own."""
import os
import sys

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
import jax
import jax.numpy as jnp

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 5
key = jax.random.PRNGKey(0)
sizes = [512, 1024, 1024, 512, 10]
keys = jax.random.split(key, len(sizes))
params = [(jax.random.normal(k, (a, b)) * 0.02, jnp.zeros(b)) for k, a, b in zip(keys, sizes, sizes[1:])]
x = jax.random.normal(keys[-1], (256, 512))
y = jax.nn.one_hot(jnp.arange(256) % 10, 10)


def loss(p):
    h = x
    for w, b in p[:-1]:
        h = jax.nn.gelu(h @ w + b)
    w, b = p[-1]
    return -jnp.mean(jnp.sum(jax.nn.log_softmax(h @ w + b) * y, axis=1))


@jax.jit
def step(p, m):
    l, g = jax.value_and_grad(loss)(p)
    m = jax.tree_util.tree_map(lambda a, b: 0.9 * a + 0.1 * b, m, g)
    p = jax.tree_util.tree_map(lambda a, b: a - 0.01 * b, p, m)
    return p, m, l


m = jax.tree_util.tree_map(jnp.zeros_like, params)
for _ in range(steps):
    params, m, l = step(params, m)
print(f"jax mlp training: {steps} steps, loss {float(l.block_until_ready()):.4f}")
