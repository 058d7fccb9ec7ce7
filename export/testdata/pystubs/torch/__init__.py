"""A stand-in for torch: tensor(list, dtype).reshape(shape) only."""
int = 'int'


class Tensor:
    def __init__(self, items, shape):
        self.items, self.shape = list(items), tuple(shape)

    def reshape(self, shape):
        n = 1
        for d in shape:
            n *= d
        if n != len(self.items):
            raise ValueError('cannot reshape %d items into %s' % (len(self.items), shape))
        return Tensor(self.items, shape)


def tensor(items, dtype=None):
    return Tensor(items, (len(items),))
