"""The activator: holds KServe v2 requests for a service scaled to zero, wakes it, and forwards them."""
