# Stand-in for JAX's examples/ package (github.com/jax-ml/jax, examples/): only what
# jax_mnist_classifier.py imports from it, the datasets module, without a download.
