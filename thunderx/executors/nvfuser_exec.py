"""placeholder"""


def nvfuser_available() -> bool:
    return False
