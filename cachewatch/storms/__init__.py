"""Why a function keeps recompiling: bursts of recompiles found, judged as storms or first passes, kept per run, and the fix each calls for."""
