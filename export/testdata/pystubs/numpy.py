"""A stand-in for numpy: array(list).reshape(shape) only."""


class ndarray:
    def __init__(self, items, shape):
        self.items, self.shape = list(items), tuple(shape)

    def reshape(self, shape):
        n = 1
        for d in shape:
            n *= d
        if n != len(self.items):
            raise ValueError('cannot reshape %d items into %s' % (len(self.items), shape))
        return ndarray(self.items, shape)

    def flat(self):
        return list(self.items)


def array(items, dtype=None):
    return ndarray(items, (len(items),))
