"""A small variational autoencoder in Flax NNX, trained with nnx.jit and nnx.Optimizer."""

import cachewatch

cachewatch.install()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402
from flax import nnx  # noqa: E402

N_EXAMPLES, N_FEATURES, LATENT, BATCH, EPOCHS = 600, 32, 4, 64, 2


class VAE(nnx.Module):
    def __init__(self, rngs: nnx.Rngs):
        self.encoder = nnx.Linear(N_FEATURES, 32, rngs=rngs)
        self.mean = nnx.Linear(32, LATENT, rngs=rngs)
        self.log_var = nnx.Linear(32, LATENT, rngs=rngs)
        self.decoder = nnx.Linear(LATENT, N_FEATURES, rngs=rngs)
        self.rngs = rngs

    def __call__(self, x):
        h = jax.nn.relu(self.encoder(x))
        mean, log_var = self.mean(h), self.log_var(h)
        noise = jax.random.normal(self.rngs.noise(), mean.shape)
        z = mean + jnp.exp(0.5 * log_var) * noise
        return self.decoder(z), mean, log_var


def vae_loss(model, x):
    reconstruction, mean, log_var = model(x)
    mse = jnp.mean(jnp.square(reconstruction - x))
    kl = -0.5 * jnp.mean(1 + log_var - jnp.square(mean) - jnp.exp(log_var))
    return mse + 0.1 * kl


@nnx.jit
def train_step(model, optimizer, x):
    loss, grads = nnx.value_and_grad(vae_loss)(model, x)
    optimizer.update(model, grads)
    return loss


@nnx.jit
def eval_step(model, x):
    return vae_loss(model, x)


def main():
    data = jax.random.uniform(jax.random.key(0), (N_EXAMPLES, N_FEATURES))
    model = VAE(nnx.Rngs(params=1, noise=2))
    optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
    for epoch in range(EPOCHS):
        for start in range(0, N_EXAMPLES - BATCH + 1, BATCH):
            loss = train_step(model, optimizer, data[start : start + BATCH])
        print(f"epoch {epoch}: loss {float(loss):.4f} eval {float(eval_step(model, data)):.4f}")


if __name__ == "__main__":
    main()
    cachewatch.flush(30)
