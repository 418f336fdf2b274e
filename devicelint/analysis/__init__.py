"""Facts several rules share: the node index, import names, and device placement."""
