"""Input checks shared by the ops of every family: errors that name the argument and its value."""


def check(cond, msg: str) -> None:
    if not cond:
        raise ValueError(msg)
