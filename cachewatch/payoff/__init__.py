"""Whether each jit pays for itself: its verdict against running eagerly, how compile time grows with program size, and compile-time regressions between runs."""
