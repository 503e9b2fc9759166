"""One reconcile pass in named stages over one pass context (`pass_context.ReconcilePass`).

`tailpilot.controllers.reconcile.reconciler.Reconciler.reconcile` runs them in order: admission, the
candidate engines, the engine (build, profile, regression gate, then the rollout strategy's
answer), the rollout of the children, the conditions, the status write and the Events. Each stage
reads and changes the pass context; none returns ad-hoc tuples or fills out-lists.
"""
