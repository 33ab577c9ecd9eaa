"""Errors raised by :mod:`placement.service`."""

from __future__ import annotations

from placement.errors import PlacementError


class ServiceError(PlacementError):
    """The placement service refused a request, or cannot start as configured.

    Raised on the scheduler for a malformed worker report or a bad configuration value;
    a client helper (:func:`~placement.service.client.reload_model`) re-raises the
    scheduler's error. Workers never see it on the path that places a file: a worker
    that cannot reach the service places files with its local policy instead.
    """


class ServiceConfigError(ServiceError, ValueError):
    """A ``placement.*`` Dask configuration value is missing or invalid (names the key and the
    fix), or an option or argument of the service's classes has a bad value (names the
    argument, the value and what it must be)."""


class WorkerRemoved(ServiceError):
    """A lease renewal from a worker the scheduler has removed from the cluster.

    The scheduler plugin answers it with ``{"refused": reason}`` rather than an error,
    so that a retiring worker's last renewal does not log a traceback on the scheduler.
    """


class StaleReport(ServiceError):
    """A lease renewal overtaken by a later report of the same worker (it numbers its
    reports; see :mod:`placement.service.ledger`), or one of a removed worker's process
    arriving after a new worker registered at its address: nothing of it is recorded.

    Only a report its worker gave up waiting for can be overtaken, and a removed worker's
    process is closing, so no worker waits for the answer; the scheduler plugin answers
    ``{"refused": reason}`` all the same.
    """


class ServiceUnavailable(ServiceError, ConnectionError):
    """The scheduler does not run the placement service (no handler answered)."""
