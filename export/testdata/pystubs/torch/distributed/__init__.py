RANK = 0


def get_rank():
    return RANK
