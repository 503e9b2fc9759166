"""The operator process: flags into settings, kopf wiring, one loop per service, leader election, liveness."""
