"""Task tokens of the size Step Functions hands out.

Gap (moto 5.2.1): the interpreter's ``ContextObject.update_task_token`` - where a
``.waitForTaskToken`` task and an activity task get their token - returns a 36-character
uuid. Tokens from the service are opaque strings of about 370 to 720 characters, and the
API allows up to 2,048 (``TaskToken``: "Length Constraints: Minimum length of 1. Maximum
length of 2048.",
https://docs.aws.amazon.com/step-functions/latest/apireference/API_SendTaskSuccess.html).
A design that stores tokens (a DynamoDB item holding a queue of parked waiters, a message,
a log line) and was only tried with 36-character ones may not fit them on AWS.

Fix: every token is ``length`` characters (default :data:`DEFAULT_LENGTH`, about the size of
the service's largest) of the URL-safe base64 alphabet: random filler followed by a
per-cloud sequence number (scrambled), so tokens are unique by construction at any length and carry
nothing a caller could parse. A length too short to number every token the cloud hands
out (64**length of them) raises :class:`TaskTokenSpaceExhausted` rather than repeat one.

Proof: ``tests/local/test_patch_task_tokens.py``.
"""

from __future__ import annotations

import itertools
import secrets
import string
import threading
from contextlib import ExitStack

from moto.stepfunctions.parser.asl.eval.states import ContextObject, TaskData

from locked_workflow.testing.seams import patch_attribute

#: The API's bounds on a task token's length.
MIN_LENGTH, MAX_LENGTH = 1, 2048
#: Tokens from the service run to about 720 characters.
DEFAULT_LENGTH = 700
#: Characters of the sequence number (64**11 tokens: more than any cloud hands out).
_SEQUENCE_WIDTH = 11
_ALPHABET = string.ascii_letters + string.digits + "-_"


class TaskTokenSpaceExhausted(RuntimeError):
    """Every token of the configured length has been handed out."""


def validate_length(length: int) -> int:
    """``length`` if it is a task token length the API allows; ValueError otherwise."""
    if isinstance(length, bool) or not isinstance(length, int) or not MIN_LENGTH <= length <= MAX_LENGTH:
        raise ValueError(
            f"task_token_length must be an integer from {MIN_LENGTH} to {MAX_LENGTH} "
            f"(the API's bounds on TaskToken), got {length!r}"
        )
    return length


class TokenFactory:
    """Unique, opaque task tokens of one length."""

    def __init__(self, length: int = DEFAULT_LENGTH) -> None:
        self.length = validate_length(length)
        self._width = min(length, _SEQUENCE_WIDTH)
        self._space = len(_ALPHABET) ** self._width
        # n -> (a*n + b) mod 64**width with an odd a is a bijection: the numbers stay
        # unique but do not count up visibly.
        self._scramble = (secrets.randbelow(self._space // 2) * 2 + 1, secrets.randbelow(self._space))
        self._sequence = itertools.count()
        self._lock = threading.Lock()

    def __call__(self) -> str:
        with self._lock:
            number = next(self._sequence)
        if number >= self._space:
            raise TaskTokenSpaceExhausted(
                f"all {self._space} task tokens of {self.length} characters are taken; "
                "use a longer task_token_length"
            )
        factor, offset = self._scramble
        number = (factor * number + offset) % self._space
        digits = []
        for _ in range(self._width):
            number, digit = divmod(number, len(_ALPHABET))
            digits.append(_ALPHABET[digit])
        filler = secrets.token_urlsafe(self.length)[: self.length - self._width]
        return filler + "".join(reversed(digits))


def apply(stack: ExitStack, length: int = DEFAULT_LENGTH) -> None:
    new_token = TokenFactory(length)

    def update_task_token(self):  # type: ignore[no-untyped-def]
        token = new_token()
        self.context_object_data["Task"] = TaskData(Token=token)
        return token

    patch_attribute(stack, ContextObject, "update_task_token", update_task_token, by=__name__)
