"""The ranks of one multi-process job compared: which rank compiled what the others did not."""
