"""The error that stops a job or keeps it from starting. A module of its own, importing
nothing, so that every jobs module (input, storage, output, job) imports it at the top."""
from __future__ import annotations


class JobError(RuntimeError):
    """The job cannot run (or go on); the message says why and what to do."""
