"""What was compiled: a compile's program in each format, the diff of two compiles, the equation profile, and recompiles that produced a program compiled before."""
