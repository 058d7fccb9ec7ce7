def with_sharding_constraint(x, s):
    return ('constrained', x, s)
