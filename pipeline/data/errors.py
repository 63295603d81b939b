"""The error that stops a job or keeps it from starting. It imports nothing, so every jobs module can import it at
the top."""

from __future__ import annotations


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


class JobError(RuntimeError):
    """The job cannot run or go on; the message says why and what to do."""


class OutputGone(JobError):
    """A job's OUTPUT.partial was removed while the job ran; nothing may write there until a new run starts it over."""

    @classmethod
    def at(cls, where) -> "OutputGone":
        return cls(
            f"{where} was removed while the job ran; the answers it held are gone; "
            f"run the same command again to start over"
        )
