"""The benchmark: a Triton fleet simulator, traces, baselines, an oracle and the comparison run."""
