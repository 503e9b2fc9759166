"""What the decisions read, and each service's memory of it.

Prometheus (its access rules, client and answers), the pods' Triton metrics pages, and the
per-service runtime that holds the reads, the learned state and the loop's timers.
"""
