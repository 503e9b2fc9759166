"""GPU products: the nodes' free capacity and the candidates' records of a product choice."""
