"""How a new engine reaches the pods: the rollout strategies and a canary's lifecycle and analysis."""
