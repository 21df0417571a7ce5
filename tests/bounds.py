"""How long a test lets the product take: the product's own bound for what is timed, read
from the product, plus one stated margin for what that bound does not count."""
from trainer.supervision.peers import FINAL_STATE_WAIT_SEC, LOST_AFTER_SEC  # noqa: F401 (the tests' names for them)
from trainer.supervision.supervise import END_GRACE_SEC, FOLLOW_MARGIN_SEC  # noqa: F401
from trainer.report import STOP_GRACE_SEC  # noqa: F401

# What a product's bound does not count: processes and containers starting (TensorFlow's
# import alone takes 7-9 s of CPU on a 2-vCPU machine, and a job starts several), Python
# and TensorFlow ending, and the test's own polling, on a machine whose other core runs
# another test's work.
MARGIN_SEC = 45.0


def within(product_bound_sec: float) -> float:
    """The longest a test waits for what the product bounds by `product_bound_sec`."""
    return product_bound_sec + MARGIN_SEC


# A lost peer host: noticed within LOST_AFTER_SEC of its silence, then this host's own
# processes are ended (END_GRACE_SEC at most).
PEER_LOST_SEC = LOST_AFTER_SEC + END_GRACE_SEC
