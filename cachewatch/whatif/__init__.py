"""What a fix would buy: a run's compiles of one function replayed through a padding policy and priced on the run's own figures."""
