"""Leaves every job shares: the REST client and its Protocols, the status codec, conditions, Events.

Also the clock, the operator's settings and metrics, the watches' store and the admin-key Secret.
"""
