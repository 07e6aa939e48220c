# SPDX-License-Identifier: Apache-2.0
"""The exceptions wisp raises. Each C++ exception type maps to one class here:

=========================  ==========================================================
C++                        Python
=========================  ==========================================================
``wisp::logic_error``      :class:`LogicError` (a :class:`ValueError`)
``wisp::format_error``     :class:`FormatError` (a :class:`ValueError`)
``wisp::infeasible_error`` :class:`InfeasibleError` (a :class:`ValueError`)
``wisp::out_of_memory``    :class:`OutOfMemoryError` (a :class:`MemoryError`)
``wisp::error``            :class:`Error`
=========================  ==========================================================

Every class derives from :class:`Error`, so ``except wisp.Error`` catches them all. A failed
call leaves the object it was made on unchanged.
"""
from typing import Optional

__all__ = ["Error", "LogicError", "FormatError", "InfeasibleError", "OutOfMemoryError"]


class Error(Exception):
    """Base of every exception wisp raises."""


class LogicError(Error, ValueError):
    """A precondition was violated: bad argument, id out of range, impossible configuration.
    The message names the offending values."""


class FormatError(Error, ValueError):
    """A file or record is malformed (truncated, corrupted, inconsistent with its header).

    Attributes:
        offset: byte offset in the input where the problem was found, or ``None`` when unknown.
        path: the file or folder that was being read, or ``None`` for in-memory input.
    """

    def __init__(self, message: str, offset: Optional[int] = None, path: Optional[str] = None):
        super().__init__(message)
        self.offset = offset
        self.path = path


class InfeasibleError(Error, ValueError):
    """No configuration satisfies the constraints (e.g. no expert/KV split of the budget meets
    the KV admission floor).

    Attributes:
        minimum_budget: the smallest budget in bytes that has a feasible split, or ``None``.
    """

    def __init__(self, message: str, minimum_budget: Optional[int] = None):
        super().__init__(message)
        self.minimum_budget = minimum_budget


class OutOfMemoryError(Error, MemoryError):
    """A memory pool, slot range or address range is exhausted; nothing was changed or leaked."""
