"""The client's exceptions: one hierarchy, lower-layer errors mapped once at the boundary."""

from __future__ import annotations

from ..protocol.errors import Problem


class LmspClientError(Exception):
    """Base of every error the LMSP client raises."""


class ProblemError(LmspClientError):
    """The service answered with a problem document (``application/problem+json``)."""

    def __init__(self, problem: Problem) -> None:
        detail = f": {problem.detail}" if problem.detail else ""
        super().__init__(f"{problem.status} {problem.code}{detail}")
        self.problem = problem

    @property
    def status(self) -> int:
        """The HTTP status of the problem."""
        return self.problem.status

    @property
    def code(self) -> str:
        """The LMSP problem code, e.g. ``model_not_found``."""
        return self.problem.code


class ServiceUnreachable(LmspClientError):
    """The service could not be reached, or a stream was cut and could not be resumed."""


class ProtocolViolation(LmspClientError):
    """The service answered something LMSP 1.0 does not allow."""
